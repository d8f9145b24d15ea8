//! `bookctl catalog ...` and `bookctl search ...`: the operator's changes to venues, halls and
//! events (create, update, retire; delist a show), and a buyer's search over the shows listed.
//!
//! Owns these subcommands' arguments, their translation to the SDK's messages (a hall's
//! sections are given as the same JSON the REST API takes) and their output.

use clap::{Args, Subcommand};
use client::{
    CatalogAction, CatalogChangeReply, CatalogEvent, CatalogHall, CatalogRecord, CatalogRow,
    CatalogSection, CatalogVenue, SearchReply, SearchRequest,
};
use serde_json::{Value, json};

/// `bookctl catalog ...` (operator): every change is idempotent (the same create again changes
/// nothing); `--update` replaces a live record's content.
#[derive(Debug, Subcommand)]
pub enum CatalogCommand {
    /// Create (or with --update, replace) a venue.
    Venue {
        /// The venue's id (non-zero, yours to choose).
        #[arg(long, value_name = "ID")]
        id: u64,
        /// Its name.
        #[arg(long)]
        name: String,
        /// Its street address.
        #[arg(long)]
        address: String,
        /// Its city.
        #[arg(long)]
        city: String,
        /// Its postal code.
        #[arg(long)]
        postal_code: String,
        /// Latitude in degrees.
        #[arg(long, allow_negative_numbers = true)]
        lat: f64,
        /// Longitude in degrees.
        #[arg(long, allow_negative_numbers = true)]
        lon: f64,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Create a hall with its seats (or with --update, rename it: its venue and seats never
    /// change).
    ///
    /// Example: `--sections '[{"name":"Stalls","class":0,"rows":[{"label":"A","count":12,"x":0,"y":0,"dx":10}]}]'`
    /// (seat i of a row is `{label}{first_number+i}`, first_number 1 and dx 1 by default).
    Hall {
        /// The hall's id (non-zero).
        #[arg(long, value_name = "ID")]
        id: u64,
        /// Its venue.
        #[arg(long, value_name = "ID")]
        venue: u64,
        /// Its name.
        #[arg(long)]
        name: String,
        /// The sections as JSON, in seat-numbering order.
        #[arg(long, value_name = "JSON")]
        sections: String,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Create (or with --update, replace) an event.
    Event {
        /// The event's id (non-zero).
        #[arg(long, value_name = "ID")]
        id: u64,
        /// Its title.
        #[arg(long)]
        title: String,
        /// e.g. drama, opera, film.
        #[arg(long)]
        genre: String,
        /// A BCP 47 tag such as en or pt-BR.
        #[arg(long)]
        language: String,
        /// Running time in minutes.
        #[arg(long, value_name = "MIN")]
        duration_min: u32,
        /// Its description.
        #[arg(long, default_value = "")]
        description: String,
        /// An image URL (repeatable).
        #[arg(long = "image", value_name = "URL")]
        images: Vec<String>,
        #[command(flatten)]
        change: ChangeArgs,
    },
    /// Retire a venue, hall or event (kept, hidden, never referenced again), or delist a show.
    Retire {
        /// venue, hall, event or listing.
        #[arg(value_parser = ["venue", "hall", "event", "listing"])]
        kind: String,
        /// The record's id (a listing's is its show's).
        #[arg(long, value_name = "ID")]
        id: u64,
        /// Idempotency key; one is made when omitted.
        #[arg(long)]
        key: Option<String>,
    },
}

/// What a create-or-update command shares.
#[derive(Debug, Args)]
pub struct ChangeArgs {
    /// Replace the content of the live record with this id instead of creating it.
    #[arg(long)]
    update: bool,
    /// Idempotency key; one is made when omitted.
    #[arg(long)]
    pub key: Option<String>,
}

impl ChangeArgs {
    fn action(&self) -> CatalogAction {
        if self.update { CatalogAction::Update } else { CatalogAction::Create }
    }
}

impl CatalogCommand {
    /// The SDK's call: its action, record and idempotency key.
    ///
    /// # Errors
    ///
    /// A message for sections that are not the JSON a hall takes.
    pub fn into_change(self) -> Result<(CatalogAction, CatalogRecord, Option<String>), String> {
        Ok(match self {
            CatalogCommand::Venue { id, name, address, city, postal_code, lat, lon, change } => {
                let venue = CatalogVenue {
                    venue_id: id,
                    name,
                    address,
                    city,
                    postal_code,
                    latitude: lat,
                    longitude: lon,
                };
                (change.action(), CatalogRecord::Venue(venue), change.key)
            }
            CatalogCommand::Hall { id, venue, name, sections, change } => {
                let hall = CatalogHall {
                    hall_id: id,
                    venue_id: venue,
                    name,
                    sections: sections_of(&sections)?,
                };
                (change.action(), CatalogRecord::Hall(hall), change.key)
            }
            CatalogCommand::Event {
                id,
                title,
                genre,
                language,
                duration_min,
                description,
                images,
                change,
            } => {
                let event = CatalogEvent {
                    event_id: id,
                    title,
                    description,
                    genre,
                    language,
                    duration_min,
                    images,
                };
                (change.action(), CatalogRecord::Event(event), change.key)
            }
            CatalogCommand::Retire { kind, id, key } => {
                let record = match kind.as_str() {
                    "venue" => {
                        CatalogRecord::Venue(CatalogVenue { venue_id: id, ..Default::default() })
                    }
                    "hall" => {
                        CatalogRecord::Hall(CatalogHall { hall_id: id, ..Default::default() })
                    }
                    "event" => {
                        CatalogRecord::Event(CatalogEvent { event_id: id, ..Default::default() })
                    }
                    _ => CatalogRecord::ListingShowId(id),
                };
                (CatalogAction::Retire, record, key)
            }
        })
    }
}

/// A hall's sections from the JSON the REST API takes.
fn sections_of(text: &str) -> Result<Vec<CatalogSection>, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|error| format!("--sections: not JSON: {error}"))?;
    let bad = |what: &str| format!("--sections: {what}");
    let number = |value: &Value, field: &str| -> Result<Option<i64>, String> {
        match &value[field] {
            Value::Null => Ok(None),
            other => {
                other.as_i64().map(Some).ok_or_else(|| bad(&format!("{field} is not an integer")))
            }
        }
    };
    let unsigned = |value: Option<i64>, field: &str| -> Result<Option<u32>, String> {
        value
            .map(|value| u32::try_from(value).map_err(|_| bad(&format!("{field} out of range"))))
            .transpose()
    };
    let signed = |value: Option<i64>, field: &str| -> Result<Option<i32>, String> {
        value
            .map(|value| i32::try_from(value).map_err(|_| bad(&format!("{field} out of range"))))
            .transpose()
    };
    let sections = value.as_array().ok_or_else(|| bad("expected an array of sections"))?;
    sections
        .iter()
        .map(|section| {
            let rows = section["rows"].as_array().ok_or_else(|| bad("a section needs rows"))?;
            let rows = rows
                .iter()
                .map(|row| {
                    Ok(CatalogRow {
                        label: row["label"]
                            .as_str()
                            .ok_or_else(|| bad("a row needs a label"))?
                            .to_owned(),
                        first_number: unsigned(number(row, "first_number")?, "first_number")?,
                        count: unsigned(number(row, "count")?, "count")?.unwrap_or(0),
                        x: signed(number(row, "x")?, "x")?.unwrap_or(0),
                        y: signed(number(row, "y")?, "y")?.unwrap_or(0),
                        dx: signed(number(row, "dx")?, "dx")?,
                        dy: signed(number(row, "dy")?, "dy")?.unwrap_or(0),
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(CatalogSection {
                name: section["name"]
                    .as_str()
                    .ok_or_else(|| bad("a section needs a name"))?
                    .to_owned(),
                class: unsigned(number(section, "class")?, "class")?.unwrap_or(0),
                rows,
            })
        })
        .collect()
}

/// What a catalog change did, as JSON.
pub fn changed_json(reply: &CatalogChangeReply) -> Value {
    json!({"kind": reply.kind, "id": reply.id, "revision": reply.revision, "changed": reply.changed})
}

/// What a catalog change did, as one line of text.
pub fn changed_text(reply: &CatalogChangeReply) -> String {
    let already = if reply.changed { "" } else { " (already so: nothing changed)" };
    format!("{} {}: catalog revision {}{already}", reply.kind, reply.id, reply.revision)
}

/// `bookctl search ...`: the shows listed in the catalog, as the answering node knows them.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Keywords (typos tolerated) over titles, venues and descriptions.
    #[arg(long)]
    q: Option<String>,
    /// The venue's city (case and accents ignored).
    #[arg(long)]
    city: Option<String>,
    /// The venue's postal code (case and spaces ignored).
    #[arg(long)]
    postal_code: Option<String>,
    /// A point: latitude in degrees (with --lon).
    #[arg(long, allow_negative_numbers = true)]
    lat: Option<f64>,
    /// A point: longitude in degrees (with --lat).
    #[arg(long, allow_negative_numbers = true)]
    lon: Option<f64>,
    /// Only venues within this many km of the point.
    #[arg(long)]
    radius_km: Option<f64>,
    /// Only shows starting at or after this time (Unix ms).
    #[arg(long, value_name = "MS")]
    from_ms: Option<u64>,
    /// Only shows starting before this time (Unix ms).
    #[arg(long, value_name = "MS")]
    until_ms: Option<u64>,
    /// The event's genre.
    #[arg(long)]
    genre: Option<String>,
    /// start, distance or relevance.
    #[arg(long, default_value = "start")]
    sort: String,
    /// Results per page (1..=100).
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// The `next cursor` of the previous page (with the same other options).
    #[arg(long)]
    cursor: Option<String>,
}

impl SearchArgs {
    /// The SDK's request.
    pub fn request(&self) -> SearchRequest {
        SearchRequest {
            q: self.q.clone().unwrap_or_default(),
            city: self.city.clone().unwrap_or_default(),
            postal_code: self.postal_code.clone().unwrap_or_default(),
            lat: self.lat,
            lon: self.lon,
            radius_km: self.radius_km,
            from_ms: self.from_ms.unwrap_or(0),
            until_ms: self.until_ms.unwrap_or(0),
            genre: self.genre.clone().unwrap_or_default(),
            sort: self.sort.clone(),
            limit: self.limit,
            cursor: self.cursor.clone().unwrap_or_default(),
        }
    }
}

/// A page of search results, as JSON.
pub fn search_json(reply: &SearchReply) -> Value {
    let results: Vec<Value> = reply
        .results
        .iter()
        .map(|result| {
            json!({"show_id": result.show_id, "starts_at_ms": result.starts_at_ms,
                "title": result.title, "genre": result.genre, "venue": result.venue_name,
                "hall": result.hall_name, "city": result.city, "postal_code": result.postal_code,
                "distance_km": result.distance_km, "score": result.score})
        })
        .collect();
    let cursor = (!reply.next_cursor.is_empty()).then_some(&reply.next_cursor);
    json!({"results": results, "next_cursor": cursor, "as_of_log_index": reply.as_of_log_index})
}

/// A page of search results, one line a show, then the next page's cursor.
pub fn search_text(reply: &SearchReply) -> String {
    let mut lines: Vec<String> = reply
        .results
        .iter()
        .map(|result| {
            let distance =
                result.distance_km.map(|km| format!(" ({km:.1} km)")).unwrap_or_default();
            format!(
                "show {}: {} ({}) at {}, {} {}{distance}, starts at {} ms",
                result.show_id,
                result.title,
                result.genre,
                result.venue_name,
                result.hall_name,
                result.city,
                result.starts_at_ms
            )
        })
        .collect();
    if lines.is_empty() {
        lines.push("no shows found".to_owned());
    }
    if !reply.next_cursor.is_empty() {
        lines.push(format!("next cursor: {}", reply.next_cursor));
    }
    lines.join("\n")
}
