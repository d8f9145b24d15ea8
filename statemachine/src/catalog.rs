//! The catalog: what buyers browse. Venues, their halls with the seat geometry drawn on a map,
//! events, and listings (which event a show is a showing of, in which hall, when). Recorded by
//! the metadata group (group 0), which every node replicates, so every node can search and
//! browse it from its own replica.
//!
//! Owns the catalog records, their shape checks and their rules: ids are chosen by the operator
//! (non-zero); creating a record again with the same content is an idempotent success, with
//! other content `catalog_exists`; an update needs the record and keeps its id; a retired record
//! is kept (old bookings still name it) but can no longer be updated or referenced; a hall's
//! geometry never changes once created (a seat map's geometry is cached for ever), and a
//! listing keeps its event and hall (only its start time moves). A listing needs its show placed
//! (placement is the same group's). Never holds prices or sale state, which stay with the show
//! in its data group (one source of truth; reads join the two).
//!
//! A hall's seats are numbered in order section → row → seat from 0, the numbering of the show
//! made from it ([`Hall::layout`]); seat `i` of a row is labelled `{row label}{first number + i}`
//! (e.g. `B12`) and drawn at `(x + i·dx, y + i·dy)`. Row labels are upper-case letters, unique in
//! the hall, so a label names one seat and reads back unambiguously ([`Hall::seat_of`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::SeatRange;
use crate::ids::{EventId, HallId, SeatNo, ShowId, VenueId};
use crate::limits::*;
use crate::outcome::{Rejection, Reply};
use crate::placement::Placement;

/// The kinds of catalog record, as rejections and replies name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum CatalogKind {
    /// A venue.
    Venue,
    /// A hall.
    Hall,
    /// An event.
    Event,
    /// A listing (keyed by its show).
    Listing,
}

impl CatalogKind {
    /// The lower-case name clients see.
    pub fn name(self) -> &'static str {
        match self {
            CatalogKind::Venue => "venue",
            CatalogKind::Hall => "hall",
            CatalogKind::Event => "event",
            CatalogKind::Listing => "listing",
        }
    }
}

/// One catalog change, proposed to the metadata group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CatalogCommand {
    /// A venue created, updated or retired.
    Venue {
        /// The venue.
        venue: VenueId,
        /// The change.
        change: Change<VenueSpec>,
    },
    /// A hall created (its geometry for ever), renamed (`Update` with the same venue and
    /// geometry) or retired.
    Hall {
        /// The hall.
        hall: HallId,
        /// The change.
        change: Change<HallSpec>,
    },
    /// An event created, updated or retired.
    Event {
        /// The event.
        event: EventId,
        /// The change.
        change: Change<EventSpec>,
    },
    /// A show listed, rescheduled (`Update` with the same event and hall) or delisted.
    Listing {
        /// The show.
        show: ShowId,
        /// The change.
        change: Change<ListingSpec>,
    },
}

/// What a catalog command does to its record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change<T> {
    /// Creates the record (the same content again is an idempotent success).
    Create(T),
    /// Replaces the content of a live record.
    Update(T),
    /// Retires the record (again: an idempotent success).
    Retire,
}

/// A venue's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VenueSpec {
    /// Its name.
    pub name: String,
    /// Its street address.
    pub address: String,
    /// Its city.
    pub city: String,
    /// Its postal code.
    pub postal_code: String,
    /// Latitude in micro-degrees (−90,000,000..=90,000,000).
    pub lat_e6: i32,
    /// Longitude in micro-degrees (−180,000,000..=180,000,000).
    pub lon_e6: i32,
}

/// A hall's content: its venue, its name and its seat geometry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HallSpec {
    /// The venue it is in.
    pub venue: VenueId,
    /// Its name.
    pub name: String,
    /// Its sections, in seat-numbering order.
    pub sections: Vec<Section>,
}

/// A section of a hall: rows of one seat class.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// Its name (e.g. "Stalls").
    pub name: String,
    /// The seat class of every seat in it (an index into a show's prices).
    pub class: u8,
    /// Its rows, in seat-numbering order.
    pub rows: Vec<Row>,
}

/// A straight row of seats.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// Its label: 1..=4 upper-case letters, unique in the hall.
    pub label: String,
    /// The number on its first seat.
    pub first_number: u32,
    /// Seats in it.
    pub count: u32,
    /// Where its first seat is drawn.
    pub x: i32,
    /// Where its first seat is drawn.
    pub y: i32,
    /// The step from one seat to the next.
    pub dx: i32,
    /// The step from one seat to the next.
    pub dy: i32,
}

/// An event's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSpec {
    /// Its title.
    pub title: String,
    /// Its description (may be empty).
    pub description: String,
    /// Its genre (e.g. "drama").
    pub genre: String,
    /// Its language (a BCP 47 tag such as "en" or "pt-BR").
    pub language: String,
    /// Its running time in minutes.
    pub duration_min: u32,
    /// Its images, by URL.
    pub images: Vec<String>,
}

/// A listing's content: which event the show is a showing of, where and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListingSpec {
    /// The event.
    pub event: EventId,
    /// The hall (its seats are the show's).
    pub hall: HallId,
    /// When it starts, in Unix milliseconds.
    pub starts_at_ms: u64,
}

/// A catalog record: its content, whether it is retired, and the log index of its last change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record<T> {
    /// Its content.
    pub spec: T,
    /// Whether it is retired (kept, but hidden from browsing and no longer referenced).
    pub retired: bool,
    /// The log index of its last change.
    pub revision: u64,
}

/// The catalog of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Catalog {
    /// The log index of the last change (0: never changed).
    revision: u64,
    venues: BTreeMap<VenueId, Record<VenueSpec>>,
    halls: BTreeMap<HallId, Record<HallSpec>>,
    events: BTreeMap<EventId, Record<EventSpec>>,
    listings: BTreeMap<ShowId, Record<ListingSpec>>,
}

impl Catalog {
    /// The log index of the last change (0: never changed): a reader that saw this revision has
    /// seen the whole catalog as it is.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// One venue.
    pub fn venue(&self, venue: VenueId) -> Option<&Record<VenueSpec>> {
        self.venues.get(&venue)
    }

    /// One hall.
    pub fn hall(&self, hall: HallId) -> Option<&Record<HallSpec>> {
        self.halls.get(&hall)
    }

    /// One event.
    pub fn event(&self, event: EventId) -> Option<&Record<EventSpec>> {
        self.events.get(&event)
    }

    /// One show's listing.
    pub fn listing(&self, show: ShowId) -> Option<&Record<ListingSpec>> {
        self.listings.get(&show)
    }

    /// Whether buyers browsing see `show`: listed and not delisted, its event, hall and venue
    /// live. The one rule of what is browsable, for browsing and search alike.
    pub fn browsable(&self, show: ShowId) -> bool {
        let live = |retired: Option<bool>| retired == Some(false);
        let Some(listing) = self.listings.get(&show) else { return false };
        let hall = self.halls.get(&listing.spec.hall);
        !listing.retired
            && live(self.events.get(&listing.spec.event).map(|event| event.retired))
            && live(hall.map(|hall| hall.retired))
            && live(hall.and_then(|hall| self.venues.get(&hall.spec.venue)).map(|v| v.retired))
    }

    /// Every venue, in id order (retired ones too).
    pub fn venues(&self) -> impl Iterator<Item = (VenueId, &Record<VenueSpec>)> {
        self.venues.iter().map(|(&id, record)| (id, record))
    }

    /// Every hall, in id order (retired ones too).
    pub fn halls(&self) -> impl Iterator<Item = (HallId, &Record<HallSpec>)> {
        self.halls.iter().map(|(&id, record)| (id, record))
    }

    /// Every event, in id order (retired ones too).
    pub fn events(&self) -> impl Iterator<Item = (EventId, &Record<EventSpec>)> {
        self.events.iter().map(|(&id, record)| (id, record))
    }

    /// Every listing, in show order (delisted ones too).
    pub fn listings(&self) -> impl Iterator<Item = (ShowId, &Record<ListingSpec>)> {
        self.listings.iter().map(|(&id, record)| (id, record))
    }

    /// Applies one catalog change at log index `index`.
    pub(crate) fn apply(
        &mut self,
        placement: &Placement,
        index: u64,
        command: &CatalogCommand,
    ) -> Result<Reply, Rejection> {
        command.validate()?;
        let (kind, id, changed) = match command {
            CatalogCommand::Venue { venue, change } => {
                let changed =
                    put(&mut self.venues, *venue, change, index, VENUES_MAX, |_, _| Ok(()))
                        .map_err(|error| error.of(CatalogKind::Venue))?;
                (CatalogKind::Venue, venue.0, changed)
            }
            CatalogCommand::Hall { hall, change } => {
                if let Change::Create(spec) | Change::Update(spec) = change {
                    live(&self.venues, spec.venue, CatalogKind::Venue)?;
                }
                let changed = put(&mut self.halls, *hall, change, index, HALLS_MAX, |old, new| {
                    if old.venue == new.venue && old.sections == new.sections {
                        Ok(())
                    } else {
                        Err(Rejection::invalid(
                            "hall: its venue and seat geometry never change (create another hall)",
                        ))
                    }
                })
                .map_err(|error| error.of(CatalogKind::Hall))?;
                (CatalogKind::Hall, hall.0, changed)
            }
            CatalogCommand::Event { event, change } => {
                let changed =
                    put(&mut self.events, *event, change, index, EVENTS_MAX, |_, _| Ok(()))
                        .map_err(|error| error.of(CatalogKind::Event))?;
                (CatalogKind::Event, event.0, changed)
            }
            CatalogCommand::Listing { show, change } => {
                if let Change::Create(spec) | Change::Update(spec) = change {
                    if placement.group_of(*show).is_none() {
                        return Err(Rejection::ShowNotFound);
                    }
                    live(&self.events, spec.event, CatalogKind::Event)?;
                    let hall = live(&self.halls, spec.hall, CatalogKind::Hall)?;
                    live(&self.venues, hall.spec.venue, CatalogKind::Venue)?;
                }
                let limit = PLACED_SHOWS_MAX;
                let changed = put(&mut self.listings, *show, change, index, limit, |old, new| {
                    if old.event == new.event && old.hall == new.hall {
                        Ok(())
                    } else {
                        Err(Rejection::invalid(
                            "listing: a show keeps its event and hall (only its start time moves)",
                        ))
                    }
                })
                .map_err(|error| error.of(CatalogKind::Listing))?;
                (CatalogKind::Listing, show.0, changed)
            }
        };
        if changed {
            self.revision = index;
        }
        Ok(Reply::CatalogChanged { kind, id, revision: self.revision, changed })
    }
}

impl Catalog {
    /// The catalog's invariants: every record passes its shape check and was changed no later
    /// than the catalog's revision, which is no later than the applied index; every reference
    /// names a record that exists (a hall its venue, a listing its event and hall); every
    /// listed show is placed.
    pub(crate) fn check(&self, placement: &Placement, applied_index: u64) -> Result<(), String> {
        if self.revision > applied_index {
            return Err(format!("catalog revision {} is ahead of the log", self.revision));
        }
        let revisions = self
            .venues
            .values()
            .map(|record| record.revision)
            .chain(self.halls.values().map(|record| record.revision))
            .chain(self.events.values().map(|record| record.revision))
            .chain(self.listings.values().map(|record| record.revision));
        for revision in revisions {
            if revision > self.revision || revision == 0 {
                return Err(format!("a catalog record has revision {revision}"));
            }
        }
        for (id, venue) in &self.venues {
            venue.spec.validate().map_err(|error| format!("venue {id}: {error}"))?;
        }
        for (id, hall) in &self.halls {
            hall.spec.validate().map_err(|error| format!("hall {id}: {error}"))?;
            if !self.venues.contains_key(&hall.spec.venue) {
                return Err(format!("hall {id} is in a venue that does not exist"));
            }
        }
        for (id, event) in &self.events {
            event.spec.validate().map_err(|error| format!("event {id}: {error}"))?;
        }
        for (show, listing) in &self.listings {
            listing.spec.validate().map_err(|error| format!("listing {show}: {error}"))?;
            if placement.group_of(*show).is_none() {
                return Err(format!("listing {show} is of a show that is not placed"));
            }
            if !self.events.contains_key(&listing.spec.event)
                || !self.halls.contains_key(&listing.spec.hall)
            {
                return Err(format!("listing {show} names a missing event or hall"));
            }
        }
        Ok(())
    }
}

/// The live record `id`, or why it cannot be referenced.
fn live<K: Ord, T>(
    records: &BTreeMap<K, Record<T>>,
    id: K,
    kind: CatalogKind,
) -> Result<&Record<T>, Rejection> {
    match records.get(&id) {
        None => Err(Rejection::CatalogNotFound { kind }),
        Some(record) if record.retired => Err(Rejection::CatalogRetired { kind }),
        Some(record) => Ok(record),
    }
}

/// Why `put` refused, before the kind is known.
enum PutError {
    NotFound,
    Exists,
    Retired,
    Full,
    Other(Rejection),
}

impl PutError {
    fn of(self, kind: CatalogKind) -> Rejection {
        match self {
            PutError::NotFound => Rejection::CatalogNotFound { kind },
            PutError::Exists => Rejection::CatalogExists { kind },
            PutError::Retired => Rejection::CatalogRetired { kind },
            PutError::Full => {
                Rejection::invalid(format!("{}: the catalog holds as many as it may", kind.name()))
            }
            PutError::Other(rejection) => rejection,
        }
    }
}

/// Applies `change` to record `id` of `records`: whether anything changed. `may_update` judges
/// an update of a live record from its old content to its new one.
fn put<K: Ord, T: Clone + PartialEq>(
    records: &mut BTreeMap<K, Record<T>>,
    id: K,
    change: &Change<T>,
    index: u64,
    limit: usize,
    may_update: impl Fn(&T, &T) -> Result<(), Rejection>,
) -> Result<bool, PutError> {
    let full = records.len() >= limit;
    let existing = records.get_mut(&id);
    match (change, existing) {
        (Change::Create(spec), Some(record)) if record.spec == *spec => Ok(false),
        (Change::Create(_), Some(_)) => Err(PutError::Exists),
        (Change::Create(_), None) if full => Err(PutError::Full),
        (Change::Create(spec), None) => {
            records.insert(id, Record { spec: spec.clone(), retired: false, revision: index });
            Ok(true)
        }
        (Change::Update(_), None) | (Change::Retire, None) => Err(PutError::NotFound),
        (Change::Update(_), Some(record)) if record.retired => Err(PutError::Retired),
        (Change::Update(spec), Some(record)) if record.spec == *spec => Ok(false),
        (Change::Update(spec), Some(record)) => {
            may_update(&record.spec, spec).map_err(PutError::Other)?;
            record.spec = spec.clone();
            record.revision = index;
            Ok(true)
        }
        (Change::Retire, Some(record)) if record.retired => Ok(false),
        (Change::Retire, Some(record)) => {
            record.retired = true;
            record.revision = index;
            Ok(true)
        }
    }
}

impl CatalogCommand {
    /// Checks the command's shape (no state needed): ids non-zero, texts and geometry within
    /// bounds.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the first problem.
    pub fn validate(&self) -> Result<(), Rejection> {
        let (id, spec_check): (u64, Option<Result<(), Rejection>>) = match self {
            CatalogCommand::Venue { venue, change } => {
                (venue.0, change.spec().map(VenueSpec::validate))
            }
            CatalogCommand::Hall { hall, change } => {
                (hall.0, change.spec().map(HallSpec::validate))
            }
            CatalogCommand::Event { event, change } => {
                (event.0, change.spec().map(EventSpec::validate))
            }
            CatalogCommand::Listing { show, change } => {
                (show.0, change.spec().map(ListingSpec::validate))
            }
        };
        if id == 0 {
            return Err(Rejection::invalid("id: must be non-zero"));
        }
        spec_check.unwrap_or(Ok(()))
    }
}

impl<T> Change<T> {
    /// The content it writes, if any.
    pub fn spec(&self) -> Option<&T> {
        match self {
            Change::Create(spec) | Change::Update(spec) => Some(spec),
            Change::Retire => None,
        }
    }
}

/// Checks a text field: `min..=max` bytes, no control characters, no surrounding spaces.
fn text(field: &str, value: &str, min: usize, max: usize) -> Result<(), Rejection> {
    if value.len() < min || value.len() > max {
        return Err(Rejection::invalid(format!(
            "{field}: {min}..={max} bytes, got {}",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Rejection::invalid(format!("{field}: no control characters")));
    }
    if value.trim() != value {
        return Err(Rejection::invalid(format!("{field}: no leading or trailing spaces")));
    }
    Ok(())
}

impl VenueSpec {
    fn validate(&self) -> Result<(), Rejection> {
        text("name", &self.name, 1, CATALOG_NAME_BYTES_MAX)?;
        text("address", &self.address, 1, CATALOG_NAME_BYTES_MAX)?;
        text("city", &self.city, 1, CATALOG_NAME_BYTES_MAX)?;
        text("postal_code", &self.postal_code, 1, POSTAL_CODE_BYTES_MAX)?;
        if !self.postal_code.chars().all(|c| c.is_ascii_alphanumeric() || c == ' ' || c == '-') {
            return Err(Rejection::invalid("postal_code: letters, digits, spaces and '-' only"));
        }
        if !(-90_000_000..=90_000_000).contains(&self.lat_e6) {
            return Err(Rejection::invalid("lat_e6: -90000000..=90000000 micro-degrees"));
        }
        if !(-180_000_000..=180_000_000).contains(&self.lon_e6) {
            return Err(Rejection::invalid("lon_e6: -180000000..=180000000 micro-degrees"));
        }
        Ok(())
    }
}

impl EventSpec {
    fn validate(&self) -> Result<(), Rejection> {
        text("title", &self.title, 1, CATALOG_NAME_BYTES_MAX)?;
        text("description", &self.description, 0, DESCRIPTION_BYTES_MAX)?;
        text("genre", &self.genre, 1, GENRE_BYTES_MAX)?;
        let language_ok = (2..=35).contains(&self.language.len())
            && self.language.split('-').all(|part| {
                (1..=8).contains(&part.len()) && part.chars().all(|c| c.is_ascii_alphanumeric())
            });
        if !language_ok {
            return Err(Rejection::invalid("language: a BCP 47 tag such as \"en\" or \"pt-BR\""));
        }
        if !(1..=EVENT_DURATION_MIN_MAX).contains(&self.duration_min) {
            return Err(Rejection::invalid(format!(
                "duration_min: 1..={EVENT_DURATION_MIN_MAX} minutes"
            )));
        }
        if self.images.len() > EVENT_IMAGES_MAX {
            return Err(Rejection::invalid(format!("images: at most {EVENT_IMAGES_MAX}")));
        }
        for image in &self.images {
            text("images", image, 1, IMAGE_URL_BYTES_MAX)?;
            let scheme = image.starts_with("https://") || image.starts_with("http://");
            if !(scheme || image.starts_with('/')) || image.contains(char::is_whitespace) {
                return Err(Rejection::invalid("images: http(s) URLs or absolute paths"));
            }
        }
        Ok(())
    }
}

impl ListingSpec {
    fn validate(&self) -> Result<(), Rejection> {
        if self.event.0 == 0 || self.hall.0 == 0 {
            return Err(Rejection::invalid("listing: event and hall must be non-zero"));
        }
        if self.starts_at_ms == 0 || self.starts_at_ms > LOG_TIME_MS_MAX {
            return Err(Rejection::invalid(format!("starts_at_ms: 1..={LOG_TIME_MS_MAX}")));
        }
        Ok(())
    }
}

impl HallSpec {
    fn validate(&self) -> Result<(), Rejection> {
        if self.venue.0 == 0 {
            return Err(Rejection::invalid("venue: must be non-zero"));
        }
        text("name", &self.name, 1, CATALOG_NAME_BYTES_MAX)?;
        if !(1..=HALL_SECTIONS_MAX).contains(&self.sections.len()) {
            return Err(Rejection::invalid(format!("sections: 1..={HALL_SECTIONS_MAX}")));
        }
        let mut labels = std::collections::BTreeSet::new();
        let mut seats: u64 = 0;
        for section in &self.sections {
            text("sections.name", &section.name, 1, CATALOG_NAME_BYTES_MAX)?;
            if usize::from(section.class) >= SEAT_CLASSES_PER_SHOW_MAX {
                return Err(Rejection::invalid(format!(
                    "sections.class: 0..{SEAT_CLASSES_PER_SHOW_MAX}"
                )));
            }
            if !(1..=SECTION_ROWS_MAX).contains(&section.rows.len()) {
                return Err(Rejection::invalid(format!("sections.rows: 1..={SECTION_ROWS_MAX}")));
            }
            for row in &section.rows {
                let label_ok = (1..=ROW_LABEL_BYTES_MAX).contains(&row.label.len())
                    && row.label.chars().all(|c| c.is_ascii_uppercase());
                if !label_ok {
                    return Err(Rejection::invalid(format!(
                        "rows.label: 1..={ROW_LABEL_BYTES_MAX} upper-case letters, got {:?}",
                        row.label
                    )));
                }
                if !labels.insert(row.label.as_str()) {
                    return Err(Rejection::invalid(format!(
                        "rows.label: {:?} is used twice in the hall",
                        row.label
                    )));
                }
                if !(1..=ROW_SEATS_MAX).contains(&row.count) {
                    return Err(Rejection::invalid(format!("rows.count: 1..={ROW_SEATS_MAX}")));
                }
                if row.first_number > SEAT_NUMBER_MAX {
                    return Err(Rejection::invalid(format!(
                        "rows.first_number: 0..={SEAT_NUMBER_MAX}"
                    )));
                }
                let coordinate = |value: i32| value.unsigned_abs() <= HALL_COORDINATE_MAX;
                if ![row.x, row.y, row.dx, row.dy].into_iter().all(coordinate) {
                    return Err(Rejection::invalid(format!(
                        "rows: x, y, dx and dy within ±{HALL_COORDINATE_MAX}"
                    )));
                }
                seats += u64::from(row.count);
            }
        }
        if seats > u64::from(SEATS_PER_SHOW_MAX) {
            return Err(Rejection::invalid(format!(
                "sections: at most {SEATS_PER_SHOW_MAX} seats in a hall, got {seats}"
            )));
        }
        Ok(())
    }

    /// How many seats the hall has.
    pub fn seat_count(&self) -> u32 {
        self.rows().map(|(_, row)| row.count).sum()
    }

    /// How many seat classes a show in this hall must price (the highest class + 1).
    pub fn class_count(&self) -> usize {
        self.sections.iter().map(|section| usize::from(section.class) + 1).max().unwrap_or(0)
    }

    /// The seat layout of a show made from this hall: its rows' classes as consecutive runs,
    /// in seat-numbering order.
    pub fn layout(&self) -> Vec<SeatRange> {
        let mut layout: Vec<SeatRange> = Vec::new();
        for (class, row) in self.rows() {
            match layout.last_mut() {
                Some(last) if last.class == class => last.count += row.count,
                _ => layout.push(SeatRange { count: row.count, class }),
            }
        }
        layout
    }

    /// Every row with its section's class, in seat-numbering order.
    pub fn rows(&self) -> impl Iterator<Item = (u8, &Row)> {
        self.sections
            .iter()
            .flat_map(|section| section.rows.iter().map(move |row| (section.class, row)))
    }

    /// Every seat in numbering order: its label, its class and where it is drawn.
    pub fn seats(&self) -> impl Iterator<Item = SeatPlace> + '_ {
        self.rows().flat_map(|(class, row)| {
            (0..row.count).map(move |i| {
                let step = i32::try_from(i).expect("a row has at most ROW_SEATS_MAX seats");
                SeatPlace {
                    label: format!("{}{}", row.label, row.first_number + i),
                    class,
                    x: row.x + step * row.dx,
                    y: row.y + step * row.dy,
                }
            })
        })
    }

    /// The label of seat `seat` (e.g. `B12`), if the hall has it.
    pub fn label_of(&self, seat: SeatNo) -> Option<String> {
        let mut first: SeatNo = 0;
        for (_, row) in self.rows() {
            if let Some(i) = seat.checked_sub(first).filter(|&i| i < row.count) {
                return Some(format!("{}{}", row.label, row.first_number + i));
            }
            first += row.count;
        }
        None
    }

    /// The number of the seat labelled `label` (e.g. `B12`), if the hall has it.
    pub fn seat_of(&self, label: &str) -> Option<SeatNo> {
        let split = label.find(|c: char| c.is_ascii_digit())?;
        let (row_label, number) = label.split_at(split);
        if number.starts_with('0') && number.len() > 1 {
            return None;
        }
        let number: u32 = number.parse().ok()?;
        let mut first: SeatNo = 0;
        for (_, row) in self.rows() {
            if row.label == row_label {
                let offset = number.checked_sub(row.first_number).filter(|&i| i < row.count)?;
                return Some(first + offset);
            }
            first += row.count;
        }
        None
    }
}

/// One seat of a hall, as a seat map draws it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeatPlace {
    /// Its label, e.g. `B12`.
    pub label: String,
    /// Its class.
    pub class: u8,
    /// Where it is drawn.
    pub x: i32,
    /// Where it is drawn.
    pub y: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn venue() -> VenueSpec {
        VenueSpec {
            name: "Odeon".into(),
            address: "1 High Street".into(),
            city: "Lisbon".into(),
            postal_code: "1100-148".into(),
            lat_e6: 38_713_000,
            lon_e6: -9_139_000,
        }
    }

    fn row(label: &str, count: u32, y: i32) -> Row {
        Row { label: label.into(), first_number: 1, count, x: 0, y, dx: 10, dy: 0 }
    }

    fn hall(venue: u64) -> HallSpec {
        HallSpec {
            venue: VenueId(venue),
            name: "Screen 1".into(),
            sections: vec![
                Section {
                    name: "Stalls".into(),
                    class: 0,
                    rows: vec![row("A", 3, 0), row("B", 4, 10)],
                },
                Section { name: "Balcony".into(), class: 1, rows: vec![row("C", 2, 30)] },
            ],
        }
    }

    fn event() -> EventSpec {
        EventSpec {
            title: "Hamlet".into(),
            description: "A prince of Denmark.".into(),
            genre: "drama".into(),
            language: "en".into(),
            duration_min: 180,
            images: vec!["https://img.example/hamlet.jpg".into()],
        }
    }

    struct Fixture {
        catalog: Catalog,
        placement: Placement,
        index: u64,
    }

    impl Fixture {
        fn new() -> Fixture {
            let mut placement = Placement::default();
            placement.place(ShowId(7), 1).unwrap();
            Fixture { catalog: Catalog::default(), placement, index: 0 }
        }

        fn apply(&mut self, command: CatalogCommand) -> Result<Reply, Rejection> {
            self.index += 1;
            let before = self.catalog.clone();
            let outcome = self.catalog.apply(&self.placement, self.index, &command);
            if outcome.is_err() {
                assert_eq!(self.catalog, before, "a refused change changed nothing");
            }
            outcome
        }

        fn built() -> Fixture {
            let mut f = Fixture::new();
            f.apply(CatalogCommand::Venue { venue: VenueId(1), change: Change::Create(venue()) })
                .unwrap();
            f.apply(CatalogCommand::Hall { hall: HallId(2), change: Change::Create(hall(1)) })
                .unwrap();
            f.apply(CatalogCommand::Event { event: EventId(3), change: Change::Create(event()) })
                .unwrap();
            f
        }
    }

    fn listing(starts_at_ms: u64) -> Change<ListingSpec> {
        Change::Create(ListingSpec { event: EventId(3), hall: HallId(2), starts_at_ms })
    }

    #[test]
    fn a_hall_numbers_and_labels_its_seats_section_by_section() {
        let hall = hall(1);
        assert_eq!(hall.seat_count(), 9);
        assert_eq!(hall.class_count(), 2);
        assert_eq!(
            hall.layout(),
            vec![SeatRange { count: 7, class: 0 }, SeatRange { count: 2, class: 1 }]
        );
        let labels: Vec<String> = hall.seats().map(|seat| seat.label).collect();
        assert_eq!(labels, ["A1", "A2", "A3", "B1", "B2", "B3", "B4", "C1", "C2"]);
        for (number, seat) in hall.seats().enumerate() {
            assert_eq!(hall.seat_of(&seat.label), Some(number as u32), "{}", seat.label);
            assert_eq!(hall.label_of(number as u32).as_ref(), Some(&seat.label));
        }
        assert_eq!(hall.label_of(9), None);
        let b3 = hall.seats().nth(5).unwrap();
        assert_eq!((b3.x, b3.y, b3.class), (20, 10, 0));
        for missing in ["A0", "A4", "D1", "B01", "B", "12", "b2", ""] {
            assert_eq!(hall.seat_of(missing), None, "{missing}");
        }
    }

    #[test]
    fn creating_again_is_idempotent_and_a_different_record_under_the_id_conflicts() {
        let mut f = Fixture::built();
        let again = CatalogCommand::Venue { venue: VenueId(1), change: Change::Create(venue()) };
        let reply = f.apply(again).unwrap();
        assert!(matches!(reply, Reply::CatalogChanged { changed: false, revision: 3, .. }));
        let other = VenueSpec { name: "Other".into(), ..venue() };
        let conflict = CatalogCommand::Venue { venue: VenueId(1), change: Change::Create(other) };
        assert_eq!(f.apply(conflict), Err(Rejection::CatalogExists { kind: CatalogKind::Venue }));
        assert_eq!(f.catalog.revision(), 3);
    }

    #[test]
    fn updates_need_a_live_record_and_retiring_hides_it_from_new_references() {
        let mut f = Fixture::built();
        let renamed = EventSpec { title: "Hamlet (revival)".into(), ..event() };
        let update =
            CatalogCommand::Event { event: EventId(3), change: Change::Update(renamed.clone()) };
        assert!(matches!(
            f.apply(update),
            Ok(Reply::CatalogChanged { changed: true, revision: 4, .. })
        ));
        assert_eq!(f.catalog.event(EventId(3)).unwrap().spec, renamed);
        let missing = CatalogCommand::Event { event: EventId(9), change: Change::Update(event()) };
        assert_eq!(f.apply(missing), Err(Rejection::CatalogNotFound { kind: CatalogKind::Event }));

        f.apply(CatalogCommand::Venue { venue: VenueId(1), change: Change::Retire }).unwrap();
        let hall = CatalogCommand::Hall { hall: HallId(5), change: Change::Create(hall(1)) };
        assert_eq!(f.apply(hall), Err(Rejection::CatalogRetired { kind: CatalogKind::Venue }));
        let listing = CatalogCommand::Listing { show: ShowId(7), change: listing(1_000) };
        assert_eq!(f.apply(listing), Err(Rejection::CatalogRetired { kind: CatalogKind::Venue }));
        let update = CatalogCommand::Venue { venue: VenueId(1), change: Change::Update(venue()) };
        assert_eq!(f.apply(update), Err(Rejection::CatalogRetired { kind: CatalogKind::Venue }));
        let again = CatalogCommand::Venue { venue: VenueId(1), change: Change::Retire };
        assert!(matches!(f.apply(again), Ok(Reply::CatalogChanged { changed: false, .. })));
    }

    #[test]
    fn a_hall_keeps_its_geometry_and_a_listing_its_event_and_hall() {
        let mut f = Fixture::built();
        let renamed = HallSpec { name: "Screen One".into(), ..hall(1) };
        f.apply(CatalogCommand::Hall { hall: HallId(2), change: Change::Update(renamed) }).unwrap();
        let mut moved = hall(1);
        moved.sections[0].rows[0].count = 4;
        let update = CatalogCommand::Hall { hall: HallId(2), change: Change::Update(moved) };
        assert!(matches!(f.apply(update), Err(Rejection::InvalidArgument { .. })));

        let unplaced = CatalogCommand::Listing { show: ShowId(8), change: listing(1_000) };
        assert_eq!(f.apply(unplaced), Err(Rejection::ShowNotFound));
        f.apply(CatalogCommand::Listing { show: ShowId(7), change: listing(1_000) }).unwrap();
        let later = ListingSpec { event: EventId(3), hall: HallId(2), starts_at_ms: 2_000 };
        f.apply(CatalogCommand::Listing { show: ShowId(7), change: Change::Update(later) })
            .unwrap();
        assert_eq!(f.catalog.listing(ShowId(7)).unwrap().spec.starts_at_ms, 2_000);
        let elsewhere = ListingSpec { hall: HallId(9), ..later };
        let update = CatalogCommand::Listing { show: ShowId(7), change: Change::Update(elsewhere) };
        assert_eq!(f.apply(update), Err(Rejection::CatalogNotFound { kind: CatalogKind::Hall }));
    }

    #[test]
    fn bad_shapes_are_refused_with_the_field_named() {
        let mut f = Fixture::built();
        let mut bad_halls = Vec::new();
        let mut h = hall(1);
        h.sections[1].rows[0].label = "A".into();
        bad_halls.push((h, "used twice"));
        let mut h = hall(1);
        h.sections[0].rows[0].label = "A1".into();
        bad_halls.push((h, "upper-case letters"));
        let mut h = hall(1);
        h.sections[0].rows[0].count = 0;
        bad_halls.push((h, "rows.count"));
        let mut h = hall(1);
        h.sections[0].rows[0].dx = 2_000_000;
        bad_halls.push((h, "within"));
        let mut h = hall(1);
        h.sections.clear();
        bad_halls.push((h, "sections"));
        for (spec, expected) in bad_halls {
            let command = CatalogCommand::Hall { hall: HallId(4), change: Change::Create(spec) };
            let error = f.apply(command).unwrap_err().to_string();
            assert!(error.contains(expected), "{error} should mention {expected}");
        }
        let venues = [
            VenueSpec { name: String::new(), ..venue() },
            VenueSpec { city: " Lisbon".into(), ..venue() },
            VenueSpec { postal_code: "1100\n".into(), ..venue() },
            VenueSpec { lat_e6: 90_000_001, ..venue() },
            VenueSpec { lon_e6: -180_000_001, ..venue() },
        ];
        for spec in venues {
            let command = CatalogCommand::Venue { venue: VenueId(4), change: Change::Create(spec) };
            assert!(matches!(f.apply(command), Err(Rejection::InvalidArgument { .. })));
        }
        let events = [
            EventSpec { language: "english language".into(), ..event() },
            EventSpec { duration_min: 0, ..event() },
            EventSpec { images: vec!["javascript:alert(1)".into()], ..event() },
            EventSpec { description: "x".repeat(DESCRIPTION_BYTES_MAX + 1), ..event() },
        ];
        for spec in events {
            let command = CatalogCommand::Event { event: EventId(4), change: Change::Create(spec) };
            assert!(matches!(f.apply(command), Err(Rejection::InvalidArgument { .. })));
        }
        let zero = CatalogCommand::Venue { venue: VenueId(0), change: Change::Create(venue()) };
        assert!(matches!(f.apply(zero), Err(Rejection::InvalidArgument { .. })));
    }
}
