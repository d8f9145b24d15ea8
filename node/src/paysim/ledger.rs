//! The simulated provider's ledger: every charge and refund it ever made, durable on disk.
//!
//! Owns the file `ledger.jsonl` in the data folder: one JSON record per line, appended and
//! synced (`sync_data`) before the call that made it is answered, so a charge the provider
//! acknowledged survives `kill -9`. On open, every line is read back; a torn last line (a crash
//! mid-append, never acknowledged) is cut off. [`Ledger::in_memory`] keeps no file, for the
//! simulator, whose provider never loses power. Never decides whether to charge (`mod.rs` does):
//! it only records and looks up.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The ledger's file name inside the data folder.
pub const LEDGER_FILE: &str = "ledger.jsonl";

/// What a charge came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChargeStatus {
    /// The money was taken.
    Succeeded,
    /// The card was refused: nothing was taken.
    Declined,
}

/// One charge, made once per idempotency key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// The provider's id, `ch_<n>`.
    pub id: String,
    /// The caller's idempotency key (bookingd's payment attempt id).
    pub key: String,
    /// The payment attempt the charge is for.
    pub payment_id: String,
    /// Minor units asked for.
    pub amount_minor: u64,
    /// ISO 4217 code.
    pub currency: String,
    /// What came of it.
    pub status: ChargeStatus,
    /// Unix milliseconds when it was made.
    pub at_ms: u64,
}

/// One refund, made once per idempotency key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    /// The provider's id, `re_<n>`.
    pub id: String,
    /// The caller's idempotency key (its refund id).
    pub key: String,
    /// The refunded charge.
    pub charge_id: String,
    /// Minor units given back.
    pub amount_minor: u64,
    /// Unix milliseconds when it was made.
    pub at_ms: u64,
}

/// One line of the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// A charge.
    Charge(Charge),
    /// A refund.
    Refund(Refund),
}

/// The ledger, in memory and on disk.
#[derive(Debug)]
pub struct Ledger {
    /// Where records are appended; `None` in memory only.
    file: Option<File>,
    records: Vec<Record>,
    charges_by_key: HashMap<String, usize>,
    charges_by_id: HashMap<String, usize>,
    refunds_by_key: HashMap<String, usize>,
    charges: usize,
    refunds: usize,
}

impl Ledger {
    /// Opens (or creates) the ledger in `dir`, reading back every record.
    ///
    /// # Errors
    ///
    /// The file cannot be read or written, or a line other than the last is not a record.
    pub fn open(dir: &Path) -> io::Result<Ledger> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(LEDGER_FILE);
        let mut file = OpenOptions::new().read(true).append(true).create(true).open(&path)?;
        let mut ledger = Ledger { file: Some(file.try_clone()?), ..Ledger::in_memory() };
        let mut whole = 0u64;
        let mut reader = BufReader::new(&mut file);
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                break;
            }
            match (line.ends_with('\n'), serde_json::from_str::<Record>(line.trim_end())) {
                (true, Ok(record)) => {
                    whole += line.len() as u64;
                    ledger.index(record);
                }
                // A torn last line: the append that wrote it was never acknowledged.
                (false, _) => break,
                (true, Err(error)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{}: record {}: {error}", path.display(), ledger.records.len() + 1),
                    ));
                }
            }
        }
        drop(reader);
        file.set_len(whole)?;
        file.sync_all()?;
        Ok(ledger)
    }

    /// An empty ledger kept in memory only.
    pub fn in_memory() -> Ledger {
        Ledger {
            file: None,
            records: Vec::new(),
            charges_by_key: HashMap::new(),
            charges_by_id: HashMap::new(),
            refunds_by_key: HashMap::new(),
            charges: 0,
            refunds: 0,
        }
    }

    fn index(&mut self, record: Record) {
        let at = self.records.len();
        match &record {
            Record::Charge(charge) => {
                self.charges_by_key.insert(charge.key.clone(), at);
                self.charges_by_id.insert(charge.id.clone(), at);
                self.charges += 1;
            }
            Record::Refund(refund) => {
                self.refunds_by_key.insert(refund.key.clone(), at);
                self.refunds += 1;
            }
        }
        self.records.push(record);
    }

    /// Appends `record` and syncs it to disk (if it has a file) before returning.
    fn append(&mut self, record: Record) -> io::Result<()> {
        if let Some(file) = &mut self.file {
            let mut line = serde_json::to_vec(&record).map_err(io::Error::other)?;
            line.push(b'\n');
            file.write_all(&line)?;
            file.sync_data()?;
        }
        self.index(record);
        Ok(())
    }

    /// The id the next charge gets.
    pub fn next_charge_id(&self) -> String {
        format!("ch_{}", self.charges + 1)
    }

    /// The id the next refund gets.
    pub fn next_refund_id(&self) -> String {
        format!("re_{}", self.refunds + 1)
    }

    /// Records `charge`, durably.
    ///
    /// # Errors
    ///
    /// The disk refused the append (nothing is recorded in memory either).
    pub fn record_charge(&mut self, charge: Charge) -> io::Result<()> {
        assert!(!self.charges_by_key.contains_key(&charge.key), "one charge per key");
        self.append(Record::Charge(charge))
    }

    /// Records `refund`, durably.
    ///
    /// # Errors
    ///
    /// The disk refused the append.
    pub fn record_refund(&mut self, refund: Refund) -> io::Result<()> {
        assert!(!self.refunds_by_key.contains_key(&refund.key), "one refund per key");
        self.append(Record::Refund(refund))
    }

    /// The charge made under `key`, if any.
    pub fn charge_by_key(&self, key: &str) -> Option<&Charge> {
        self.charges_by_key.get(key).and_then(|at| self.charge_at(*at))
    }

    /// The charge `id`, if any.
    pub fn charge(&self, id: &str) -> Option<&Charge> {
        self.charges_by_id.get(id).and_then(|at| self.charge_at(*at))
    }

    fn charge_at(&self, at: usize) -> Option<&Charge> {
        match &self.records[at] {
            Record::Charge(charge) => Some(charge),
            Record::Refund(_) => None,
        }
    }

    /// The refund made under `key`, if any.
    pub fn refund_by_key(&self, key: &str) -> Option<&Refund> {
        match &self.records[*self.refunds_by_key.get(key)?] {
            Record::Refund(refund) => Some(refund),
            Record::Charge(_) => None,
        }
    }

    /// Minor units refunded so far on `charge_id`.
    pub fn refunded_minor(&self, charge_id: &str) -> u64 {
        self.records
            .iter()
            .filter_map(|record| match record {
                Record::Refund(refund) if refund.charge_id == charge_id => {
                    Some(refund.amount_minor)
                }
                _ => None,
            })
            .sum()
    }

    /// Every record, oldest first.
    pub fn records(&self) -> &[Record] {
        &self.records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(ledger: &Ledger, key: &str) -> Charge {
        Charge {
            id: ledger.next_charge_id(),
            key: key.to_owned(),
            payment_id: "1-2".to_owned(),
            amount_minor: 5_000,
            currency: "EUR".to_owned(),
            status: ChargeStatus::Succeeded,
            at_ms: 1,
        }
    }

    #[test]
    fn records_survive_reopening_and_a_torn_last_line_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path()).unwrap();
        let first = charge(&ledger, "k1");
        ledger.record_charge(first.clone()).unwrap();
        let refund = Refund {
            id: ledger.next_refund_id(),
            key: "r1".to_owned(),
            charge_id: first.id.clone(),
            amount_minor: 2_000,
            at_ms: 2,
        };
        ledger.record_refund(refund.clone()).unwrap();
        drop(ledger);
        // A crash in the middle of a third append.
        let path = dir.path().join(LEDGER_FILE);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(br#"{"kind":"charge","id":"ch_2","ke"#).unwrap();
        drop(file);

        let mut ledger = Ledger::open(dir.path()).unwrap();
        assert_eq!(ledger.records(), [Record::Charge(first.clone()), Record::Refund(refund)]);
        assert_eq!(ledger.charge_by_key("k1"), Some(&first));
        assert_eq!(ledger.charge(&first.id), Some(&first));
        assert_eq!(ledger.refund_by_key("r1").map(|r| r.amount_minor), Some(2_000));
        assert_eq!(ledger.refunded_minor(&first.id), 2_000);
        assert_eq!(ledger.next_charge_id(), "ch_2");
        let second = charge(&ledger, "k2");
        ledger.record_charge(second.clone()).unwrap();
        drop(ledger);
        let ledger = Ledger::open(dir.path()).unwrap();
        assert_eq!(ledger.charge_by_key("k2"), Some(&second), "the cut line was overwritten");
    }

    #[test]
    fn a_corrupt_record_before_the_last_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LEDGER_FILE), "not json\n{}\n").unwrap();
        assert_eq!(Ledger::open(dir.path()).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
