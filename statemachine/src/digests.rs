//! The leader's digests of the group's state at checkpoint indexes, replicated so that every
//! replica can compare its own.
//!
//! Owns the record: a digest is the SHA-256 of the group's snapshot encoding right after the
//! entry at `index` was applied, computed by the leader's auditor off the apply path (every
//! replica keeps a copy of its state at the same checkpoint indexes) and proposed as a command.
//! A replica whose own digest at that index differs has diverged. Never computes a digest itself
//! (apply stays cheap) and never judges a replica: the node's auditor compares.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::limits::AUDIT_DIGESTS_KEPT;
use crate::outcome::{Outcome, Rejection, Reply};
use crate::snapshot::Digest;

/// The last [`AUDIT_DIGESTS_KEPT`] digests the leaders recorded, by log index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digests {
    by_index: BTreeMap<u64, Digest>,
}

impl Digests {
    /// The digest recorded for the state right after entry `index`, if one is kept.
    pub fn at(&self, index: u64) -> Option<&Digest> {
        self.by_index.get(&index)
    }

    /// Every kept digest, oldest index first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Digest)> {
        self.by_index.iter().map(|(index, digest)| (*index, digest))
    }

    /// Records `digest` for entry `index`, applied before `applied_index` (the entry carrying
    /// the command). The first digest of an index stays: another one for it is a duplicate.
    pub(crate) fn record(&mut self, applied_index: u64, index: u64, digest: Digest) -> Outcome {
        if index == 0 || index >= applied_index {
            return Err(Rejection::invalid("index: an entry applied before this one"));
        }
        if let Some(kept) = self.by_index.get(&index) {
            return Ok(Reply::DigestRecorded { index, duplicate: true, matches: *kept == digest });
        }
        if self.by_index.len() >= AUDIT_DIGESTS_KEPT
            && self.by_index.keys().next().is_some_and(|oldest| *oldest > index)
        {
            // Older than everything kept: nobody compares with it any more.
            return Ok(Reply::DigestRecorded { index, duplicate: true, matches: true });
        }
        self.by_index.insert(index, digest);
        while self.by_index.len() > AUDIT_DIGESTS_KEPT {
            self.by_index.pop_first();
        }
        Ok(Reply::DigestRecorded { index, duplicate: false, matches: true })
    }

    /// Checks the record is bounded and names only applied entries.
    pub(crate) fn check(&self, applied_index: u64) -> Result<(), String> {
        if self.by_index.len() > AUDIT_DIGESTS_KEPT {
            return Err(format!("{} digests kept", self.by_index.len()));
        }
        match self.by_index.keys().next_back() {
            Some(last) if *last >= applied_index => {
                Err(format!("a digest of entry {last}, not applied before"))
            }
            _ => Ok(()),
        }
    }
}
