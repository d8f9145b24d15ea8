//! The catalog: the operator's changes to venues, halls and events (and delisting a show), and
//! the buyer's search over the shows listed.
//!
//! Owns building these calls and routing them: a change goes to the metadata group's leader
//! (group 0 records the catalog) with one idempotency key and the operator token, following
//! hints; a search goes to any node (every node answers from its own replica) without caching
//! who answered. Never interprets a reply.

use proto::booking::{
    CatalogAction, CatalogChangeReply, CatalogChangeRequest, SearchReply, SearchRequest,
    catalog_change_request::Record,
};

use crate::client::{Client, Kind};
use crate::error::Result;
use crate::key::CallMetadata;
use crate::route::Route;

impl Client {
    /// Creates, updates or retires a catalog record (operator call), under `key` (a fresh one
    /// when `None`; the same key on a retry). The same create again changes nothing
    /// (`changed: false`).
    ///
    /// ```no_run
    /// # async fn run(client: client::Client) -> client::Result<()> {
    /// use client::{CatalogAction, CatalogRecord, CatalogVenue};
    /// let venue = CatalogVenue {
    ///     venue_id: 1,
    ///     name: "Teatro Nacional".into(),
    ///     address: "Praça Dom Pedro IV".into(),
    ///     city: "Lisboa".into(),
    ///     postal_code: "1100-201".into(),
    ///     latitude: 38.7148,
    ///     longitude: -9.1405,
    /// };
    /// let record = CatalogRecord::Venue(venue);
    /// let reply = client.change_catalog(CatalogAction::Create, record, None).await?;
    /// println!("venue {} at revision {}", reply.id, reply.revision);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] (`catalog_exists`, `catalog_not_found`, `catalog_retired`,
    /// `invalid_argument`, `unauthenticated` or `forbidden` without the operator token),
    /// [`crate::Error::Unavailable`].
    pub async fn change_catalog(
        &self,
        action: CatalogAction,
        record: Record,
        key: Option<&str>,
    ) -> Result<CatalogChangeReply> {
        let metadata = self.operator_metadata(true, key)?;
        let request = CatalogChangeRequest { action: action as i32, record: Some(record) };
        let (reply, _) = self
            .booking_call(
                Route::Group(0),
                Kind::Mutation,
                &metadata,
                request,
                |mut c, r| async move { c.change_catalog(r).await },
            )
            .await?;
        Ok(reply)
    }

    /// Searches the shows listed in the catalog, as the answering node's replica knows it.
    /// Pass the reply's `next_cursor` (with the same other fields) for the next page.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Rejected`] with `invalid_argument` naming a bad field or a cursor of
    /// another query, [`crate::Error::Unavailable`].
    pub async fn search(&self, request: &SearchRequest) -> Result<SearchReply> {
        let metadata = CallMetadata::default();
        let (reply, _) = self
            .booking_call(
                Route::Any,
                Kind::LocalRead,
                &metadata,
                request.clone(),
                |mut c, r| async move { c.search(r).await },
            )
            .await?;
        Ok(reply)
    }
}
