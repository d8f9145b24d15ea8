//! Search over the catalog: keywords with spelling tolerance, city, postal code, distance from a
//! point, a start-time range and genre, sorted by start time, distance or relevance, and paged by
//! opaque cursors.
//!
//! Owns a tantivy index held in memory and derived from this node's replica of the metadata
//! group's catalog: one document per browsable listing (listing live, its event, hall and venue
//! live). The index follows the catalog in two steps, so the replica's lock is held only to copy:
//! [`SearchIndex::changes`] copies, under the replica's read lock, the listings whose document
//! changed since the revision indexed so far; [`SearchIndex::apply`] writes them outside the lock.
//! A full rebuild at start is the same two calls from revision 0.
//!
//! Never decides what is browsable on its own terms (the rule is `Catalog::browsable`, the one
//! browsing uses) and never returns catalog content: a hit names a show, and the caller joins it
//! with the catalog it read.
//!
//! Pages are cut by keyset, never by offset: every hit has a key that only an explicit change of
//! its own listing moves (the start time, the distance in whole metres from a fixed point, a
//! relevance score that is a sum of constant weights and so does not depend on the rest of the
//! corpus, and the show id last), and a cursor carries the key of the last hit returned. A
//! listing that matched throughout a paging is therefore returned exactly once, however many
//! listings are added or removed meanwhile.

use std::collections::BTreeSet;
use std::collections::BinaryHeap;
use std::ops::{Bound, RangeInclusive};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use statemachine::limits::{CATALOG_NAME_BYTES_MAX, GENRE_BYTES_MAX, POSTAL_CODE_BYTES_MAX};
use statemachine::{Catalog, EventId, HallId, ShowId, VenueId};
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::Column;
use tantivy::query::{
    AllQuery, BooleanQuery, ConstScoreQuery, FuzzyTermQuery, Occur, Query, RangeQuery, TermQuery,
};
use tantivy::schema::TextOptions;
use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing};
use tantivy::tokenizer::{
    AsciiFoldingFilter, LowerCaser, RawTokenizer, SimpleTokenizer, TextAnalyzer,
};
use tantivy::{
    DocId, Index, IndexReader, IndexWriter, ReloadPolicy, Score, SegmentOrdinal, SegmentReader,
    TantivyDocument, Term,
};

/// The most hits a page may ask for.
pub const SEARCH_LIMIT_MAX: u32 = 100;
/// The hits a page holds when the caller does not say.
pub const SEARCH_LIMIT_DEFAULT: u32 = 20;
/// The widest radius around a point, in km (about half the Earth's circumference).
pub const SEARCH_RADIUS_KM_MAX: f64 = 20_000.0;
/// The longest keyword query, in bytes.
pub const SEARCH_QUERY_BYTES_MAX: usize = 200;
/// The most words a keyword query may have (each word costs three fuzzy term lookups).
pub const SEARCH_QUERY_WORDS_MAX: usize = 8;
/// The longest cursor accepted, in bytes of its text (a real one is 44).
pub const SEARCH_CURSOR_BYTES_MAX: usize = 64;
/// The indexing buffer of the writer, in bytes (tantivy needs at least 15 MB per thread).
pub const SEARCH_WRITER_MEMORY_BYTES: usize = 32_000_000;
/// The mean Earth radius (IUGG), in km, used for every distance.
pub const EARTH_RADIUS_KM: f64 = 6371.0088;

const _: () = assert!(SEARCH_LIMIT_DEFAULT >= 1 && SEARCH_LIMIT_DEFAULT <= SEARCH_LIMIT_MAX);
// tantivy refuses a writer with less than 15 MB per thread (its `MEMORY_BUDGET_NUM_BYTES_MIN`,
// not exported).
const _: () = assert!(SEARCH_WRITER_MEMORY_BYTES >= 15_000_000);
const _: () = assert!(SEARCH_RADIUS_KM_MAX < std::f64::consts::PI * EARTH_RADIUS_KM);

/// Words this long (in characters) and longer match with one typo.
const FUZZY_ONE_EDIT_CHARS_MIN: usize = 4;
/// Words this long (in characters) and longer match with two typos.
const FUZZY_TWO_EDITS_CHARS_MIN: usize = 8;
/// The cursor format; a cursor of another format is refused.
const CURSOR_VERSION: u8 = 1;
/// A cursor's bytes: version, query fingerprint, then the key's three numbers.
const CURSOR_BYTES: usize = 1 + 8 + 3 * 8;

/// Tokenizes text fields and keyword queries alike: words of letters and digits, lower-cased,
/// accents folded ("São" → "sao").
const TEXT_ANALYZER: &str = "search_text";
/// Normalizes a whole keyword field (city, postal code, genre) as one lower-cased, folded term.
const KEYWORD_ANALYZER: &str = "search_keyword";

/// What each field scores when a query word matches it, exactly or with typos. Constant weights
/// (not BM25, whose IDF moves as listings come and go) keep a listing's score, and so its place
/// in a relevance paging, fixed; small integers add up exactly in `f32`.
/// In order: title, venue, description; each (exact, with typos).
const FIELD_WEIGHTS: [(Score, Score); 3] = [(8.0, 4.0), (4.0, 2.0), (2.0, 1.0)];

/// Why a search was refused.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// An argument is out of bounds; the message names the field.
    #[error("{0}")]
    InvalidArgument(String),
    /// The cursor is not one this search made, or was made for another query.
    #[error("{0}")]
    BadCursor(String),
    /// The index failed (a bug or out of memory, never the caller's fault).
    #[error("search index: {0}")]
    Index(#[from] tantivy::TantivyError),
}

/// The order of hits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Sort {
    /// Soonest first (then by show).
    #[default]
    Start,
    /// Nearest first (then soonest, then by show); needs a point.
    Distance,
    /// Best keyword match first (then soonest, then by show); needs keywords.
    Relevance,
}

/// A point and a radius around it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Near {
    /// Latitude in degrees (−90..=90).
    pub lat: f64,
    /// Longitude in degrees (−180..=180).
    pub lon: f64,
    /// The radius in km (0 < r <= [`SEARCH_RADIUS_KM_MAX`]).
    pub radius_km: f64,
}

/// A search: filters (all optional, all must hold), an order, a page size and where to resume.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchQuery {
    /// Keywords: every word must appear, with a typo or two, in the title, the venue (its name,
    /// hall or city) or the description. Blank: no keyword filter.
    pub q: Option<String>,
    /// The venue's city, ignoring case and accents.
    pub city: Option<String>,
    /// The venue's postal code, ignoring case and spaces.
    pub postal_code: Option<String>,
    /// Within a radius of a point.
    pub near: Option<Near>,
    /// Starting at or after this Unix millisecond.
    pub from_ms: Option<u64>,
    /// Starting before this Unix millisecond.
    pub until_ms: Option<u64>,
    /// The event's genre, ignoring case.
    pub genre: Option<String>,
    /// The order of hits.
    pub sort: Sort,
    /// Hits per page (1..=[`SEARCH_LIMIT_MAX`]).
    pub limit: u32,
    /// The previous page's `next_cursor`, to get the page after it.
    pub cursor: Option<String>,
}

impl Default for SearchQuery {
    fn default() -> SearchQuery {
        SearchQuery {
            q: None,
            city: None,
            postal_code: None,
            near: None,
            from_ms: None,
            until_ms: None,
            genre: None,
            sort: Sort::Start,
            limit: SEARCH_LIMIT_DEFAULT,
            cursor: None,
        }
    }
}

/// One page of hits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchPage {
    /// The hits, in the query's order.
    pub hits: Vec<Hit>,
    /// The cursor of the next page, if more hits remain.
    pub next_cursor: Option<String>,
}

/// A listing that matched.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// The show listed.
    pub show: ShowId,
    /// When it starts, in Unix milliseconds.
    pub starts_at_ms: u64,
    /// How far its venue is from the query's point, when the query has one.
    pub distance_km: Option<f64>,
    /// Its keyword score, when the query has keywords (a sum of constant field weights).
    pub score: Option<f32>,
}

/// What changed in the catalog since the index's revision: copied by [`SearchIndex::changes`]
/// under the replica's lock, written by [`SearchIndex::apply`] outside it.
#[derive(Clone, Debug)]
pub struct Changes {
    /// The index revision these changes were read against.
    since: u64,
    /// The catalog revision they bring the index to.
    revision: u64,
    /// Browsable listings whose document changed, with their new document.
    upserts: Vec<(ShowId, TantivyDocument)>,
    /// Listings that changed and are no longer browsable (maybe never indexed).
    deletes: Vec<ShowId>,
}

impl Changes {
    /// The catalog revision the index reflects once these are applied.
    pub fn revision(&self) -> u64 {
        self.revision
    }
}

/// The schema's fields.
#[derive(Clone, Copy, Debug)]
struct Fields {
    show: Field,
    starts_at_ms: Field,
    lat_e6: Field,
    lon_e6: Field,
    title: Field,
    venue: Field,
    description: Field,
    city: Field,
    postal_code: Field,
    genre: Field,
}

/// The search index of one node: in memory, rebuilt from the replica at start.
///
/// Concurrency: `search` never blocks on `apply`; concurrent `apply` calls are serialized by the
/// writer's mutex, and changes at or below the indexed revision are skipped.
pub struct SearchIndex {
    fields: Fields,
    writer: Mutex<IndexWriter<TantivyDocument>>,
    reader: IndexReader,
    /// The catalog revision the reader's searchers reflect.
    revision: AtomicU64,
}

impl SearchIndex {
    /// An empty index at revision 0.
    ///
    /// # Panics
    ///
    /// If tantivy cannot make an index in memory (a bug: nothing here depends on input).
    pub fn new() -> SearchIndex {
        let mut schema = Schema::builder();
        let indexed = |analyzer: &str| {
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer(analyzer)
                    .set_index_option(IndexRecordOption::Basic)
                    .set_fieldnorms(false),
            )
        };
        let fields = Fields {
            show: schema.add_u64_field("show", INDEXED | FAST),
            starts_at_ms: schema.add_u64_field("starts_at_ms", INDEXED | FAST),
            lat_e6: schema.add_i64_field("lat_e6", INDEXED | FAST),
            lon_e6: schema.add_i64_field("lon_e6", INDEXED | FAST),
            title: schema.add_text_field("title", indexed(TEXT_ANALYZER)),
            venue: schema.add_text_field("venue", indexed(TEXT_ANALYZER)),
            description: schema.add_text_field("description", indexed(TEXT_ANALYZER)),
            city: schema.add_text_field("city", indexed(KEYWORD_ANALYZER)),
            postal_code: schema.add_text_field("postal_code", indexed(KEYWORD_ANALYZER)),
            genre: schema.add_text_field("genre", indexed(KEYWORD_ANALYZER)),
        };
        let index = Index::create_in_ram(schema.build());
        index.tokenizers().register(TEXT_ANALYZER, text_analyzer());
        index.tokenizers().register(KEYWORD_ANALYZER, keyword_analyzer());
        let writer = index
            .writer_with_num_threads(1, SEARCH_WRITER_MEMORY_BYTES)
            .expect("an index in memory has a writer");
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .expect("an index in memory has a reader");
        SearchIndex { fields, writer: Mutex::new(writer), reader, revision: AtomicU64::new(0) }
    }

    /// The revision of the catalog the index reflects (0: nothing indexed yet).
    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::Acquire)
    }

    /// Copies what changed in `catalog` since [`revision`](Self::revision): every listing whose
    /// own record, event, hall or venue changed since, as a document if it is browsable and as a
    /// deletion if not. `None` if the index is already at the catalog's revision.
    ///
    /// Meant to be called under the replica's read lock: it only reads and copies (one pass
    /// over the catalog's records), and writes nothing.
    pub fn changes(&self, catalog: &Catalog) -> Option<Changes> {
        let since = self.revision();
        if catalog.revision() <= since {
            return None;
        }
        let newer = |revision: u64| revision > since;
        let venues: BTreeSet<VenueId> =
            catalog.venues().filter(|(_, r)| newer(r.revision)).map(|(id, _)| id).collect();
        let halls: BTreeSet<HallId> = catalog
            .halls()
            .filter(|(_, r)| newer(r.revision) || venues.contains(&r.spec.venue))
            .map(|(id, _)| id)
            .collect();
        let events: BTreeSet<EventId> =
            catalog.events().filter(|(_, r)| newer(r.revision)).map(|(id, _)| id).collect();
        let mut changes = Changes {
            since,
            revision: catalog.revision(),
            upserts: Vec::new(),
            deletes: Vec::new(),
        };
        for (show, listing) in catalog.listings() {
            let spec = &listing.spec;
            if newer(listing.revision) || events.contains(&spec.event) || halls.contains(&spec.hall)
            {
                match self.document(catalog, show) {
                    Some(document) => changes.upserts.push((show, document)),
                    None => changes.deletes.push(show),
                }
            }
        }
        Some(changes)
    }

    /// Writes `changes` (each changed listing deleted, then added again if browsable), commits
    /// and makes the result visible to searches. Changes at or below the indexed revision were
    /// applied already (by this call or a newer one) and are skipped, so applying twice is
    /// harmless.
    ///
    /// # Errors
    ///
    /// `Index` if tantivy fails; the index is then rolled back to its last revision.
    ///
    /// # Panics
    ///
    /// If `changes` were read against a revision this index has not reached (they came from
    /// another index): applying them would leave a gap.
    pub fn apply(&self, changes: Changes) -> Result<(), SearchError> {
        // A panic mid-write leaves at worst uncommitted operations read from the catalog, as
        // valid as any batch's; the next batch rewrites every listing changed since its revision.
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let indexed = self.revision();
        if changes.revision <= indexed {
            return Ok(());
        }
        assert!(
            changes.since <= indexed,
            "changes since revision {} applied to an index at {indexed}",
            changes.since
        );
        let revision = changes.revision;
        if let Err(error) = self.write(&mut writer, changes) {
            // Drops the half-written batch so the next call starts again from `indexed`.
            writer.rollback()?;
            return Err(error.into());
        }
        self.reader.reload()?;
        self.revision.store(revision, Ordering::Release);
        Ok(())
    }

    fn write(
        &self,
        writer: &mut IndexWriter<TantivyDocument>,
        changes: Changes,
    ) -> tantivy::Result<()> {
        let key = |show: ShowId| Term::from_field_u64(self.fields.show, show.0);
        for show in changes.deletes {
            writer.delete_term(key(show));
        }
        for (show, document) in changes.upserts {
            // A delete only touches documents added before it, so the new one survives.
            writer.delete_term(key(show));
            writer.add_document(document)?;
        }
        writer.commit()?;
        Ok(())
    }

    /// The document of `show`'s listing if a buyer browsing sees it (`Catalog::browsable`).
    fn document(&self, catalog: &Catalog, show: ShowId) -> Option<TantivyDocument> {
        if !catalog.browsable(show) {
            return None;
        }
        let listing = catalog.listing(show)?;
        let event = catalog.event(listing.spec.event)?;
        let hall = catalog.hall(listing.spec.hall)?;
        let venue = catalog.venue(hall.spec.venue)?;
        let (fields, mut document) = (&self.fields, TantivyDocument::default());
        document.add_u64(fields.show, show.0);
        document.add_u64(fields.starts_at_ms, listing.spec.starts_at_ms);
        document.add_i64(fields.lat_e6, i64::from(venue.spec.lat_e6));
        document.add_i64(fields.lon_e6, i64::from(venue.spec.lon_e6));
        document.add_text(fields.title, &event.spec.title);
        // "Venue" keywords match the venue's name, its hall's name and its city.
        for text in [&venue.spec.name, &hall.spec.name, &venue.spec.city] {
            document.add_text(fields.venue, text);
        }
        document.add_text(fields.description, &event.spec.description);
        document.add_text(fields.city, &venue.spec.city);
        document.add_text(fields.postal_code, postal_code_key(&venue.spec.postal_code));
        document.add_text(fields.genre, &event.spec.genre);
        Some(document)
    }

    /// One page of listings matching `query`, in its order, after its cursor.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the field out of bounds; `BadCursor` for a cursor this search
    /// did not make or made for other filters or another order; `Index` if tantivy fails.
    pub fn search(&self, query: &SearchQuery) -> Result<SearchPage, SearchError> {
        let plan = Plan::new(query)?;
        let after = match &query.cursor {
            Some(cursor) => Some(decode_cursor(cursor, plan.fingerprint)?),
            None => None,
        };
        let collector = KeysetCollector(Paging {
            sort: plan.sort,
            near: plan.near,
            after,
            wanted: plan.limit + 1,
            scored: !plan.words.is_empty(),
        });
        let searcher = self.reader.searcher();
        let mut found = searcher.search(plan.query(&self.fields).as_ref(), &collector)?;
        let more = found.len() > plan.limit;
        found.truncate(plan.limit);
        let next_cursor = match found.last() {
            Some(last) if more => Some(encode_cursor(plan.fingerprint, last.key)),
            _ => None,
        };
        let hits = found
            .into_iter()
            .map(|found| Hit {
                show: ShowId(found.key.show),
                starts_at_ms: found.key.starts_at_ms,
                distance_km: found.distance_m.map(|metres| metres as f64 / 1000.0),
                score: found.score.map(|score| score as f32),
            })
            .collect();
        Ok(SearchPage { hits, next_cursor })
    }
}

impl Default for SearchIndex {
    fn default() -> SearchIndex {
        SearchIndex::new()
    }
}

fn text_analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .build()
}

fn keyword_analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(RawTokenizer::default())
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .build()
}

/// The tokens `analyzer` makes of `text`.
fn tokens(mut analyzer: TextAnalyzer, text: &str) -> Vec<String> {
    let mut stream = analyzer.token_stream(text);
    let mut tokens = Vec::new();
    while stream.advance() {
        tokens.push(stream.token().text.clone());
    }
    tokens
}

/// A postal code as matched: spaces dropped (case and accents go in the keyword analyzer).
fn postal_code_key(code: &str) -> String {
    code.chars().filter(|c| !c.is_whitespace()).collect()
}

fn invalid(message: impl Into<String>) -> SearchError {
    SearchError::InvalidArgument(message.into())
}

/// A query checked and normalized: what it filters on, its order, and its fingerprint.
#[derive(Debug, Serialize)]
struct Plan {
    words: Vec<String>,
    city: Option<String>,
    postal_code: Option<String>,
    genre: Option<String>,
    near: Option<Near>,
    from_ms: Option<u64>,
    until_ms: Option<u64>,
    sort: Sort,
    #[serde(skip)]
    limit: usize,
    /// A hash of everything above: a cursor only resumes the query it came from.
    #[serde(skip)]
    fingerprint: u64,
}

impl Plan {
    fn new(query: &SearchQuery) -> Result<Plan, SearchError> {
        if !(1..=SEARCH_LIMIT_MAX).contains(&query.limit) {
            return Err(invalid(format!("limit: 1..={SEARCH_LIMIT_MAX}")));
        }
        let q = blank_is_none(&query.q);
        let mut words = Vec::new();
        if let Some(q) = q {
            if q.len() > SEARCH_QUERY_BYTES_MAX {
                return Err(invalid(format!("q: at most {SEARCH_QUERY_BYTES_MAX} bytes")));
            }
            // Sorted and deduplicated: the same words in any order are the same query.
            words = tokens(text_analyzer(), q)
                .into_iter()
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if words.is_empty() {
                return Err(invalid("q: needs a word of letters or digits"));
            }
            if words.len() > SEARCH_QUERY_WORDS_MAX {
                return Err(invalid(format!("q: at most {SEARCH_QUERY_WORDS_MAX} words")));
            }
        }
        let keyword = |field: &str, value: &Option<String>, bytes_max: usize| {
            let Some(value) = blank_is_none(value) else { return Ok(None) };
            if value.len() > bytes_max {
                return Err(invalid(format!("{field}: at most {bytes_max} bytes")));
            }
            Ok(tokens(keyword_analyzer(), value).into_iter().next())
        };
        let city = keyword("city", &query.city, CATALOG_NAME_BYTES_MAX)?;
        let postal_code = keyword("postal_code", &query.postal_code, POSTAL_CODE_BYTES_MAX)?
            .map(|code| postal_code_key(&code));
        let genre = keyword("genre", &query.genre, GENRE_BYTES_MAX)?;
        if let Some(near) = &query.near {
            if !(-90.0..=90.0).contains(&near.lat) {
                return Err(invalid("lat: -90..=90 degrees"));
            }
            if !(-180.0..=180.0).contains(&near.lon) {
                return Err(invalid("lon: -180..=180 degrees"));
            }
            if !(near.radius_km > 0.0 && near.radius_km <= SEARCH_RADIUS_KM_MAX) {
                return Err(invalid(format!("radius_km: 0 < r <= {SEARCH_RADIUS_KM_MAX}")));
            }
        }
        if let (Some(from_ms), Some(until_ms)) = (query.from_ms, query.until_ms)
            && until_ms <= from_ms
        {
            return Err(invalid("until_ms: must be after from_ms"));
        }
        match query.sort {
            Sort::Distance if query.near.is_none() => {
                return Err(invalid("sort: distance needs lat and lon"));
            }
            Sort::Relevance if words.is_empty() => return Err(invalid("sort: relevance needs q")),
            _ => {}
        }
        let mut plan = Plan {
            words,
            city,
            postal_code,
            genre,
            near: query.near,
            from_ms: query.from_ms,
            until_ms: query.until_ms,
            sort: query.sort,
            limit: query.limit as usize,
            fingerprint: 0,
        };
        plan.fingerprint = fingerprint(&plan);
        Ok(plan)
    }

    /// The tantivy query: one clause per word (scored), one per filter (scoring 0).
    fn query(&self, fields: &Fields) -> Box<dyn Query> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for word in &self.words {
            clauses.push((Occur::Must, word_query(fields, word)));
        }
        let mut filters: Vec<Box<dyn Query>> = Vec::new();
        for (field, value) in [
            (fields.city, &self.city),
            (fields.postal_code, &self.postal_code),
            (fields.genre, &self.genre),
        ] {
            if let Some(value) = value {
                let term = Term::from_field_text(field, value);
                filters.push(Box::new(TermQuery::new(term, IndexRecordOption::Basic)));
            }
        }
        if self.from_ms.is_some() || self.until_ms.is_some() {
            let term = |ms| Term::from_field_u64(fields.starts_at_ms, ms);
            filters.push(Box::new(RangeQuery::new(
                self.from_ms.map_or(Bound::Unbounded, |ms| Bound::Included(term(ms))),
                self.until_ms.map_or(Bound::Unbounded, |ms| Bound::Excluded(term(ms))),
            )));
        }
        if let Some(near) = &self.near {
            let (latitudes, longitudes) = bounding_box(near);
            filters.push(i64_range(fields.lat_e6, latitudes));
            // Empty: every longitude (the circle reaches a pole).
            let longitudes: Vec<(Occur, Box<dyn Query>)> = longitudes
                .into_iter()
                .map(|range| (Occur::Should, i64_range(fields.lon_e6, range)))
                .collect();
            if !longitudes.is_empty() {
                filters.push(Box::new(BooleanQuery::new(longitudes)));
            }
        }
        for filter in filters {
            clauses.push((Occur::Must, Box::new(ConstScoreQuery::new(filter, 0.0))));
        }
        if clauses.is_empty() { Box::new(AllQuery) } else { Box::new(BooleanQuery::new(clauses)) }
    }
}

fn blank_is_none(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|value| !value.is_empty())
}

/// One query word: it matches a title, venue or description exactly or within a few edits
/// (none for words under four characters, which would match too much), scoring constant weights.
fn word_query(fields: &Fields, word: &str) -> Box<dyn Query> {
    let chars = word.chars().count();
    let distance = match chars {
        _ if chars >= FUZZY_TWO_EDITS_CHARS_MIN => 2,
        _ if chars >= FUZZY_ONE_EDIT_CHARS_MIN => 1,
        _ => 0,
    };
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    let text_fields = [fields.title, fields.venue, fields.description];
    for (field, (exact, fuzzy)) in text_fields.into_iter().zip(FIELD_WEIGHTS) {
        let term = Term::from_field_text(field, word);
        let exact_query = TermQuery::new(term.clone(), IndexRecordOption::Basic);
        clauses.push((Occur::Should, Box::new(ConstScoreQuery::new(Box::new(exact_query), exact))));
        if distance > 0 {
            // Transpositions cost one edit: "hamlte" is one typo away from "hamlet".
            let fuzzy_query = FuzzyTermQuery::new(term, distance, true);
            clauses.push((
                Occur::Should,
                Box::new(ConstScoreQuery::new(Box::new(fuzzy_query), fuzzy)),
            ));
        }
    }
    Box::new(BooleanQuery::new(clauses))
}

fn i64_range(field: Field, range: RangeInclusive<i64>) -> Box<dyn Query> {
    let (low, high) = range.into_inner();
    Box::new(RangeQuery::new(
        Bound::Included(Term::from_field_i64(field, low)),
        Bound::Included(Term::from_field_i64(field, high)),
    ))
}

/// The micro-degree ranges of latitude and longitude (one or two, split at the antimeridian;
/// none when the circle reaches a pole) that hold every point within the radius. A coarse
/// filter for the index; the exact distance decides.
fn bounding_box(near: &Near) -> (RangeInclusive<i64>, Vec<RangeInclusive<i64>>) {
    let angle = near.radius_km / EARTH_RADIUS_KM;
    let (south, north) = (near.lat - angle.to_degrees(), near.lat + angle.to_degrees());
    // One micro-degree of slack on each side absorbs rounding.
    let micro =
        |low: f64, high: f64| (low * 1e6).floor() as i64 - 1..=(high * 1e6).ceil() as i64 + 1;
    let latitudes = micro(south.max(-90.0), north.min(90.0));
    if south <= -90.0 || north >= 90.0 {
        return (latitudes, Vec::new());
    }
    let spread = (angle.sin() / near.lat.to_radians().cos()).min(1.0).asin().to_degrees();
    let (west, east) = (near.lon - spread, near.lon + spread);
    let longitudes = if west < -180.0 {
        vec![micro(west + 360.0, 180.0), micro(-180.0, east)]
    } else if east > 180.0 {
        vec![micro(west, 180.0), micro(-180.0, east - 360.0)]
    } else {
        vec![micro(west, east)]
    };
    (latitudes, longitudes)
}

/// The great-circle distance in km between two points given in degrees (haversine).
fn distance_km(lat_a: f64, lon_a: f64, lat_b: f64, lon_b: f64) -> f64 {
    let (phi_a, phi_b) = (lat_a.to_radians(), lat_b.to_radians());
    let half_lat = (phi_b - phi_a) / 2.0;
    let half_lon = (lon_b - lon_a).to_radians() / 2.0;
    let h = half_lat.sin().powi(2) + phi_a.cos() * phi_b.cos() * half_lon.sin().powi(2);
    2.0 * EARTH_RADIUS_KM * h.sqrt().min(1.0).asin()
}

/// FNV-1a (64 bits) of the plan's JSON: the same on every node and build (std's `DefaultHasher`
/// may change between builds), so a cursor works on any node.
fn fingerprint(plan: &Plan) -> u64 {
    let json = serde_json::to_vec(plan).expect("a plan serializes");
    json.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Where a hit sits in the order: compared as a tuple, smallest first. `primary` is 0 when
/// sorting by start, the distance in whole metres when sorting by distance, and `u64::MAX`
/// minus the (integer) score when sorting by relevance. All three numbers are exact, so a
/// cursor's key compares the same way on every page and every node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    primary: u64,
    starts_at_ms: u64,
    show: u64,
}

fn encode_cursor(fingerprint: u64, key: Key) -> String {
    let mut bytes = Vec::with_capacity(CURSOR_BYTES);
    bytes.push(CURSOR_VERSION);
    for number in [fingerprint, key.primary, key.starts_at_ms, key.show] {
        bytes.extend_from_slice(&number.to_le_bytes());
    }
    URL_SAFE_NO_PAD.encode(bytes)
}

fn decode_cursor(text: &str, fingerprint: u64) -> Result<Key, SearchError> {
    let garbage = || SearchError::BadCursor("cursor: not a cursor of this search".into());
    if text.len() > SEARCH_CURSOR_BYTES_MAX {
        return Err(garbage());
    }
    let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| garbage())?;
    if bytes.len() != CURSOR_BYTES || bytes[0] != CURSOR_VERSION {
        return Err(garbage());
    }
    let number = |at: usize| {
        let start = 1 + at * 8;
        u64::from_le_bytes(bytes[start..start + 8].try_into().expect("eight bytes"))
    };
    if number(0) != fingerprint {
        return Err(SearchError::BadCursor(
            "cursor: made for another query (other filters or order)".into(),
        ));
    }
    Ok(Key { primary: number(1), starts_at_ms: number(2), show: number(3) })
}

/// A match as collected: its key, its distance in whole metres when the query has a point and
/// its score when it has keywords. Keys are unique, so the order is the key's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Found {
    key: Key,
    distance_m: Option<u64>,
    score: Option<u32>,
}

/// What a page collects: the `wanted` smallest keys after the cursor, within the radius.
#[derive(Clone, Copy, Debug)]
struct Paging {
    sort: Sort,
    near: Option<Near>,
    after: Option<Key>,
    wanted: usize,
    scored: bool,
}

/// Collects a page with a bounded heap per segment: one pass over the matches and `wanted`
/// memory, however many listings match.
struct KeysetCollector(Paging);

struct KeysetSegmentCollector {
    paging: Paging,
    shows: Column<u64>,
    starts: Column<u64>,
    places: Option<(Column<i64>, Column<i64>)>,
    /// A max-heap: its top is the worst match kept.
    best: BinaryHeap<Found>,
}

impl Collector for KeysetCollector {
    type Fruit = Vec<Found>;
    type Child = KeysetSegmentCollector;

    fn for_segment(
        &self,
        _segment: SegmentOrdinal,
        reader: &SegmentReader,
    ) -> tantivy::Result<KeysetSegmentCollector> {
        let fast = reader.fast_fields();
        let places = match self.0.near {
            Some(_) => Some((fast.i64("lat_e6")?, fast.i64("lon_e6")?)),
            None => None,
        };
        Ok(KeysetSegmentCollector {
            paging: self.0,
            shows: fast.u64("show")?,
            starts: fast.u64("starts_at_ms")?,
            places,
            best: BinaryHeap::with_capacity(self.0.wanted + 1),
        })
    }

    fn requires_scoring(&self) -> bool {
        self.0.scored
    }

    fn merge_fruits(&self, fruits: Vec<Vec<Found>>) -> tantivy::Result<Vec<Found>> {
        let mut found: Vec<Found> = fruits.into_iter().flatten().collect();
        found.sort_unstable();
        found.truncate(self.0.wanted);
        Ok(found)
    }
}

impl SegmentCollector for KeysetSegmentCollector {
    type Fruit = Vec<Found>;

    fn collect(&mut self, doc: DocId, score: Score) {
        let paging = &self.paging;
        let show = self.shows.first(doc).expect("every indexed listing has its show");
        let starts_at_ms = self.starts.first(doc).expect("every indexed listing has its start");
        let distance_m = match (&self.places, &paging.near) {
            (Some((lat, lon)), Some(near)) => {
                let degrees = |column: &Column<i64>| {
                    column.first(doc).expect("every indexed listing has its place") as f64 / 1e6
                };
                let distance = distance_km(near.lat, near.lon, degrees(lat), degrees(lon));
                if distance > near.radius_km {
                    return;
                }
                Some((distance * 1000.0).round() as u64)
            }
            _ => None,
        };
        // A sum of integer weights, exact in `f32`: rounding only drops the type.
        let score = score.round() as u32;
        let primary = match paging.sort {
            Sort::Start => 0,
            Sort::Distance => distance_m.unwrap_or(0),
            Sort::Relevance => u64::MAX - u64::from(score),
        };
        let key = Key { primary, starts_at_ms, show };
        if paging.after.is_some_and(|after| key <= after) {
            return;
        }
        let found = Found { key, distance_m, score: paging.scored.then_some(score) };
        if self.best.len() < paging.wanted {
            self.best.push(found);
        } else if self.best.peek().is_some_and(|worst| found < *worst) {
            self.best.pop();
            self.best.push(found);
        }
    }

    fn harvest(self) -> Vec<Found> {
        self.best.into_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statemachine::{
        CatalogCommand, Change, Command, Entry, EventSpec, Group, HallSpec, ListingSpec, Row,
        Section, VenueSpec,
    };
    use std::collections::BTreeMap;
    use std::sync::{Arc, RwLock};

    /// A metadata group that the tests change, and the index that follows it.
    struct World {
        group: Group,
        index: u64,
    }

    impl World {
        fn new() -> World {
            World { group: Group::new(), index: 0 }
        }

        fn run(&mut self, commands: Vec<Command>) {
            self.index += 1;
            let entry = Entry { index: self.index, time_ms: 1, commands };
            for outcome in self.group.apply(&entry) {
                outcome.expect("the test's catalog change is accepted");
            }
        }

        fn catalog(&mut self, command: CatalogCommand) {
            self.run(vec![Command::Catalog(command)]);
        }

        fn venue(
            &mut self,
            id: u64,
            name: &str,
            city: &str,
            postal_code: &str,
            lat: f64,
            lon: f64,
        ) {
            let spec = VenueSpec {
                name: name.into(),
                address: "1 Main Street".into(),
                city: city.into(),
                postal_code: postal_code.into(),
                lat_e6: (lat * 1e6).round() as i32,
                lon_e6: (lon * 1e6).round() as i32,
            };
            self.catalog(CatalogCommand::Venue {
                venue: VenueId(id),
                change: Change::Create(spec),
            });
            let row =
                Row { label: "A".into(), first_number: 1, count: 10, x: 0, y: 0, dx: 1, dy: 0 };
            let section = Section { name: "Stalls".into(), class: 0, rows: vec![row] };
            let hall = HallSpec {
                venue: VenueId(id),
                name: format!("{name} Hall"),
                sections: vec![section],
            };
            self.catalog(CatalogCommand::Hall { hall: HallId(id), change: Change::Create(hall) });
        }

        fn event(&mut self, id: u64, title: &str, description: &str, genre: &str) {
            let spec = EventSpec {
                title: title.into(),
                description: description.into(),
                genre: genre.into(),
                language: "en".into(),
                duration_min: 90,
                images: Vec::new(),
            };
            self.catalog(CatalogCommand::Event {
                event: EventId(id),
                change: Change::Create(spec),
            });
        }

        /// Places and lists show `show` of `event` in the hall of venue `venue`.
        fn list(&mut self, show: u64, event: u64, venue: u64, starts_at_ms: u64) {
            let spec = ListingSpec { event: EventId(event), hall: HallId(venue), starts_at_ms };
            let listing =
                CatalogCommand::Listing { show: ShowId(show), change: Change::Create(spec) };
            self.run(vec![
                Command::Place { show: ShowId(show), group: 1 },
                Command::Catalog(listing),
            ]);
        }

        fn sync(&self, index: &SearchIndex) {
            if let Some(changes) = index.changes(self.group.catalog()) {
                index.apply(changes).unwrap();
            }
        }
    }

    /// Lisbon, Porto, São Paulo; Hamlet, The Magic Flute, a concert.
    fn fixture() -> (World, SearchIndex) {
        let mut world = World::new();
        world.venue(1, "Coliseu dos Recreios", "Lisboa", "1150-321", 38.7152, -9.1404);
        world.venue(2, "Casa da Musica", "Porto", "4149 071", 41.1589, -8.6307);
        world.venue(3, "Teatro Municipal", "São Paulo", "01007-040", -23.5454, -46.6388);
        world.event(1, "Hamlet", "The prince of Denmark takes revenge.", "Drama");
        world.event(2, "The Magic Flute", "Mozart's opera, with Hamlet jokes.", "opera");
        world.event(3, "Cats", "A musical about cats.", "musical");
        world.list(11, 1, 1, 1_000);
        world.list(12, 2, 1, 2_000);
        world.list(13, 1, 2, 3_000);
        world.list(14, 3, 3, 4_000);
        world.list(15, 2, 3, 5_000);
        let index = SearchIndex::new();
        world.sync(&index);
        (world, index)
    }

    fn shows(index: &SearchIndex, query: SearchQuery) -> Vec<u64> {
        index.search(&query).unwrap().hits.iter().map(|hit| hit.show.0).collect()
    }

    fn q(text: &str) -> SearchQuery {
        SearchQuery { q: Some(text.into()), ..SearchQuery::default() }
    }

    /// Every hit of `query`, page by page.
    fn page_through(index: &SearchIndex, mut query: SearchQuery) -> Vec<Hit> {
        let mut hits = Vec::new();
        loop {
            let page = index.search(&query).unwrap();
            assert!(page.hits.len() <= query.limit as usize);
            hits.extend(page.hits);
            match page.next_cursor {
                Some(cursor) => query.cursor = Some(cursor),
                None => return hits,
            }
        }
    }

    #[test]
    fn misspelt_titles_are_found_and_short_words_match_only_exactly() {
        let (_world, index) = fixture();
        // 12 and 15 have Hamlet in their description.
        assert_eq!(shows(&index, q("Hamlte")), [11, 12, 13, 15]);
        assert_eq!(shows(&index, q("hamelt")), [11, 12, 13, 15]);
        assert_eq!(shows(&index, q("magic flut")), [12, 15]);
        assert_eq!(shows(&index, q("MAGIC   flute!")), [12, 15]);
        // Under four letters a word must be exact: "cat" is one typo from "cats", "cst" two.
        assert_eq!(shows(&index, q("cat")), Vec::<u64>::new());
        assert_eq!(shows(&index, q("cst")), Vec::<u64>::new());
        assert_eq!(shows(&index, q("cats")), [14]);
        assert_eq!(shows(&index, q("hamlet zzzz")), Vec::<u64>::new());
    }

    #[test]
    fn venue_hall_and_city_names_are_keywords_and_accents_fold() {
        let (_world, index) = fixture();
        assert_eq!(shows(&index, q("coliseu")), [11, 12]);
        assert_eq!(shows(&index, q("porto hamlet")), [13]);
        assert_eq!(shows(&index, q("casa hall")), [13]);
        assert_eq!(shows(&index, q("sao paulo")), [14, 15]);
        assert_eq!(shows(&index, q("mozarts")), [12, 15]);
    }

    #[test]
    fn city_postal_code_and_genre_ignore_case_accents_and_spaces() {
        let (_world, index) = fixture();
        let city = |city: &str| SearchQuery { city: Some(city.into()), ..SearchQuery::default() };
        assert_eq!(shows(&index, city("lisboa")), [11, 12]);
        assert_eq!(shows(&index, city("LISBOA")), [11, 12]);
        assert_eq!(shows(&index, city("Sao Paulo")), [14, 15]);
        assert_eq!(shows(&index, city("são paulo")), [14, 15]);
        assert_eq!(shows(&index, city("Paulo")), Vec::<u64>::new());
        let postal =
            |code: &str| SearchQuery { postal_code: Some(code.into()), ..SearchQuery::default() };
        assert_eq!(shows(&index, postal("4149071")), [13]);
        assert_eq!(shows(&index, postal("4149 071")), [13]);
        assert_eq!(shows(&index, postal(" 1150 - 321")), [11, 12]);
        assert_eq!(shows(&index, postal("1150-32")), Vec::<u64>::new());
        let genre =
            |genre: &str| SearchQuery { genre: Some(genre.into()), ..SearchQuery::default() };
        assert_eq!(shows(&index, genre("drama")), [11, 13]);
        assert_eq!(shows(&index, genre("OPERA")), [12, 15]);
        let both = SearchQuery { genre: Some("opera".into()), ..city("lisboa") };
        assert_eq!(shows(&index, both), [12]);
    }

    #[test]
    fn a_radius_finds_venues_within_it_and_reports_their_distance() {
        let mut world = World::new();
        // One degree of latitude is 111.195 km on this sphere: venue 2 is 3 km north of venue 1.
        world.venue(1, "Here", "Lisboa", "1000", 38.7, -9.14);
        world.venue(2, "North", "Lisboa", "1000", 38.7 + 3.0 / 111.195, -9.14);
        world.venue(3, "Far", "Porto", "4000", 41.15, -8.63);
        world.event(1, "Hamlet", "", "drama");
        for venue in 1..=3 {
            world.list(venue, 1, venue, 1_000 * (4 - venue));
        }
        let index = SearchIndex::new();
        world.sync(&index);
        let near = |radius_km| SearchQuery {
            near: Some(Near { lat: 38.7, lon: -9.14, radius_km }),
            ..SearchQuery::default()
        };
        assert_eq!(shows(&index, near(5.0)), [2, 1]); // By start time.
        assert_eq!(shows(&index, near(2.0)), [1]);
        assert_eq!(shows(&index, near(20_000.0)), [3, 2, 1]);
        let page = index.search(&SearchQuery { sort: Sort::Distance, ..near(400.0) }).unwrap();
        let distances: Vec<(u64, f64)> =
            page.hits.iter().map(|hit| (hit.show.0, hit.distance_km.unwrap())).collect();
        assert_eq!(distances.iter().map(|(show, _)| *show).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(distances[0].1 < 0.001);
        assert!((distances[1].1 - 3.0).abs() < 0.03, "{distances:?}");
        // Lisbon to Porto is about 276 km.
        assert!((270.0..280.0).contains(&distances[2].1), "{distances:?}");
        // Across the antimeridian: a point at 179.99° E finds a venue at 179.99° W.
        let mut world = World::new();
        world.venue(1, "Fiji", "Suva", "1", -17.0, -179.99);
        world.event(1, "Hamlet", "", "drama");
        world.list(1, 1, 1, 1_000);
        let index = SearchIndex::new();
        world.sync(&index);
        let query = SearchQuery {
            near: Some(Near { lat: -17.0, lon: 179.99, radius_km: 5.0 }),
            ..SearchQuery::default()
        };
        assert_eq!(shows(&index, query), [1]);
    }

    #[test]
    fn the_time_range_includes_its_start_and_excludes_its_end() {
        let (_world, index) = fixture();
        let range = |from_ms, until_ms| SearchQuery { from_ms, until_ms, ..SearchQuery::default() };
        assert_eq!(shows(&index, range(Some(2_000), Some(4_000))), [12, 13]);
        assert_eq!(shows(&index, range(Some(2_001), None)), [13, 14, 15]);
        assert_eq!(shows(&index, range(None, Some(2_001))), [11, 12]);
    }

    #[test]
    fn each_order_sorts_by_its_key_then_start_then_show() {
        let (_world, index) = fixture();
        let hamlet = SearchQuery { sort: Sort::Relevance, ..q("hamlet") };
        // Title matches (8 + 4) before the description match (2 + 1), each group by start.
        let page = index.search(&hamlet).unwrap();
        let scored: Vec<(u64, f32)> =
            page.hits.iter().map(|hit| (hit.show.0, hit.score.unwrap())).collect();
        assert_eq!(scored, [(11, 12.0), (13, 12.0), (12, 3.0), (15, 3.0)]);
        let porto = Near { lat: 41.1589, lon: -8.6307, radius_km: 20_000.0 };
        let by_distance =
            SearchQuery { near: Some(porto), sort: Sort::Distance, ..SearchQuery::default() };
        assert_eq!(shows(&index, by_distance), [13, 11, 12, 14, 15]);
        assert_eq!(shows(&index, SearchQuery::default()), [11, 12, 13, 14, 15]);
    }

    #[test]
    fn paging_returns_every_listing_once_in_order_for_every_sort() {
        let mut world = World::new();
        world.venue(1, "Near", "Lisboa", "1000", 38.70, -9.14);
        world.venue(2, "Far", "Lisboa", "1000", 38.80, -9.14);
        world.event(1, "Hamlet", "", "drama");
        world.event(2, "Other", "hamlet", "drama");
        // Start times collide in pairs so that ties fall to the show id.
        for show in 1..=50 {
            world.list(show, 1 + show % 2, 1 + show % 3 / 2, 1_000 + 1_000 * (show / 2));
        }
        let index = SearchIndex::new();
        world.sync(&index);
        let near = Near { lat: 38.7, lon: -9.14, radius_km: 50.0 };
        for sort in [Sort::Start, Sort::Distance, Sort::Relevance] {
            let query = SearchQuery { near: Some(near), sort, limit: 7, ..q("hamlet") };
            let all = index.search(&SearchQuery { limit: 100, ..query.clone() }).unwrap();
            assert_eq!(all.hits.len(), 50);
            assert_eq!(all.next_cursor, None);
            assert_eq!(page_through(&index, query), all.hits, "{sort:?}");
        }
    }

    #[test]
    fn paging_while_listings_are_added_returns_each_original_listing_exactly_once() {
        let mut world = World::new();
        world.venue(1, "Odeon", "Lisboa", "1000", 38.7, -9.14);
        world.event(1, "Hamlet", "", "drama");
        for show in 1..=40 {
            world.list(show, 1, 1, 1_000 * show);
        }
        let index = Arc::new(SearchIndex::new());
        world.sync(&index);
        let world = Arc::new(RwLock::new(world));
        // Another thread keeps listing shows anywhere among the originals while we page.
        let inserter = {
            let (world, index) = (Arc::clone(&world), Arc::clone(&index));
            std::thread::spawn(move || {
                for n in 0..60 {
                    world.write().unwrap().list(1_000 + n, 1, 1, 500 + (n * 997) % 41_000);
                    let changes = index.changes(world.read().unwrap().group.catalog());
                    if let Some(changes) = changes {
                        index.apply(changes).unwrap();
                    }
                    std::thread::yield_now();
                }
            })
        };
        let mut query = SearchQuery { limit: 7, ..SearchQuery::default() };
        let (mut seen, mut keys, mut behind, mut ahead) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for page_number in 0u64.. {
            assert!(page_number < 100, "paging does not end");
            let page = index.search(&query).unwrap();
            seen.extend(page.hits.iter().map(|hit| hit.show.0));
            keys.extend(page.hits.iter().map(|hit| (hit.starts_at_ms, hit.show.0)));
            let Some(cursor) = page.next_cursor else { break };
            query.cursor = Some(cursor);
            // Between pages: one listing before the cursor (never seen), one after (seen).
            let mut locked = world.write().unwrap();
            locked.list(5_000 + page_number, 1, 1, 1 + page_number);
            locked.list(6_000 + page_number, 1, 1, 1_000_000 + page_number);
            behind.push(5_000 + page_number);
            ahead.push(6_000 + page_number);
            locked.sync(&index);
        }
        inserter.join().unwrap();
        assert!(keys.windows(2).all(|pair| pair[0] < pair[1]), "{keys:?}");
        let counts = seen.iter().fold(BTreeMap::new(), |mut counts, show| {
            *counts.entry(*show).or_insert(0) += 1;
            counts
        });
        assert!(counts.values().all(|&count| count == 1), "{counts:?}");
        assert!((1..=40).chain(ahead).all(|show| counts.contains_key(&show)), "{counts:?}");
        assert!(behind.iter().all(|show| !counts.contains_key(show)), "{counts:?}");
    }

    #[test]
    fn a_cursor_only_resumes_its_own_query() {
        let (_world, index) = fixture();
        let query = SearchQuery { limit: 2, ..SearchQuery::default() };
        let cursor = index.search(&query).unwrap().next_cursor.unwrap();
        let other = SearchQuery {
            genre: Some("opera".into()),
            cursor: Some(cursor.clone()),
            ..query.clone()
        };
        let error = index.search(&other).unwrap_err();
        assert!(
            matches!(&error, SearchError::BadCursor(m) if m.contains("another query")),
            "{error}"
        );
        // Another page size is the same query.
        let resumed = SearchQuery { limit: 3, cursor: Some(cursor.clone()), ..query.clone() };
        assert_eq!(shows(&index, resumed), [13, 14, 15]);
        let garbage = [String::from("garbage!"), cursor[..cursor.len() - 2].into(), "A".repeat(44)];
        for cursor in garbage {
            let query = SearchQuery { cursor: Some(cursor), ..query.clone() };
            assert!(matches!(index.search(&query), Err(SearchError::BadCursor(_))));
        }
    }

    #[test]
    fn retired_listings_events_and_venues_disappear_and_a_reschedule_moves() {
        let (mut world, index) = fixture();
        world.catalog(CatalogCommand::Listing { show: ShowId(11), change: Change::Retire });
        world.sync(&index);
        assert_eq!(shows(&index, SearchQuery::default()), [12, 13, 14, 15]);
        world.catalog(CatalogCommand::Event { event: EventId(3), change: Change::Retire });
        world.sync(&index);
        assert_eq!(shows(&index, SearchQuery::default()), [12, 13, 15]);
        world.catalog(CatalogCommand::Venue { venue: VenueId(3), change: Change::Retire });
        world.sync(&index);
        assert_eq!(shows(&index, SearchQuery::default()), [12, 13]);
        let later = ListingSpec { event: EventId(2), hall: HallId(1), starts_at_ms: 9_000 };
        world.catalog(CatalogCommand::Listing { show: ShowId(12), change: Change::Update(later) });
        world.sync(&index);
        let page = index.search(&SearchQuery::default()).unwrap();
        let starts: Vec<(u64, u64)> =
            page.hits.iter().map(|hit| (hit.show.0, hit.starts_at_ms)).collect();
        assert_eq!(starts, [(13, 3_000), (12, 9_000)]);
        // A rebuild from scratch gives the same index.
        let rebuilt = SearchIndex::new();
        world.sync(&rebuilt);
        assert_eq!(rebuilt.search(&SearchQuery::default()).unwrap(), page);
        assert_eq!(rebuilt.revision(), world.group.catalog().revision());
    }

    #[test]
    fn applying_the_same_or_older_changes_again_is_harmless() {
        let (mut world, index) = fixture();
        world.event(4, "Macbeth", "", "drama");
        world.list(16, 4, 1, 6_000);
        let old = index.changes(world.group.catalog()).unwrap();
        world.list(17, 4, 1, 7_000);
        let new = index.changes(world.group.catalog()).unwrap();
        assert!(old.revision() < new.revision());
        index.apply(new.clone()).unwrap();
        index.apply(new).unwrap();
        index.apply(old).unwrap();
        assert_eq!(index.revision(), world.group.catalog().revision());
        assert_eq!(shows(&index, q("macbeth")), [16, 17]);
        assert!(index.changes(world.group.catalog()).is_none());
    }

    #[test]
    fn invalid_arguments_are_refused_with_the_field_named() {
        let (_world, index) = fixture();
        let near = |lat, lon, radius_km| Some(Near { lat, lon, radius_km });
        let cases = [
            (SearchQuery { limit: 0, ..SearchQuery::default() }, "limit"),
            (SearchQuery { limit: 101, ..SearchQuery::default() }, "limit"),
            (SearchQuery { sort: Sort::Distance, ..SearchQuery::default() }, "sort: distance"),
            (SearchQuery { sort: Sort::Relevance, ..q("  ") }, "sort: relevance"),
            (q("!!!"), "q:"),
            (q(&(1..=9).map(|n| format!("word{n} ")).collect::<String>()), "q:"),
            (q(&"x".repeat(201)), "q:"),
            (SearchQuery { near: near(91.0, 0.0, 1.0), ..SearchQuery::default() }, "lat"),
            (SearchQuery { near: near(0.0, f64::NAN, 1.0), ..SearchQuery::default() }, "lon"),
            (SearchQuery { near: near(0.0, 0.0, 0.0), ..SearchQuery::default() }, "radius_km"),
            (SearchQuery { near: near(0.0, 0.0, 20_001.0), ..SearchQuery::default() }, "radius_km"),
            (
                SearchQuery { from_ms: Some(5), until_ms: Some(5), ..SearchQuery::default() },
                "until_ms",
            ),
            (SearchQuery { city: Some("x".repeat(201)), ..SearchQuery::default() }, "city"),
        ];
        for (query, field) in cases {
            let error = index.search(&query).unwrap_err();
            assert!(
                matches!(&error, SearchError::InvalidArgument(m) if m.starts_with(field)),
                "{error}"
            );
        }
    }
}
