//! An ordered map, set and fixed-length vector whose clone is cheap and whose writes copy only a
//! small part (a show's seats are a [`CowVec`]).
//!
//! The raft crate keeps the applied state behind an `Arc` and mutates it with `Arc::make_mut`,
//! so a snapshot build, a backup or an auditor checkpoint that holds a view makes the next apply
//! copy whatever it writes to. A `std` map would copy whole; [`CowMap`] is a `BTreeMap` of
//! shared chunks of at most [`CHUNK_MAX`] entries, and copies only the chunk a write touches.
//! Unshared, each operation costs one lookup in the small outer map more than a `BTreeMap`.
//!
//! It iterates and encodes exactly like a `BTreeMap` with the same entries (a map of `len`
//! pairs in key order), so the snapshot bytes do not depend on how the entries are chunked.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A chunk that grows past this splits in two halves. Larger chunks make the unshared map
/// faster (a shorter chunk list to search) and a copy after a share longer: at 1,024, the
/// `apply` benchmark ran 8% under a plain `BTreeMap` (14% at 256), and the first apply after a
/// view of a sold-out 100,000-seat show copied for 0.11 ms.
pub(crate) const CHUNK_MAX: usize = 1024;

/// A `BTreeMap` in shared chunks.
///
/// Invariants: no chunk is empty; chunks are in key order, each keyed at most its smallest key
/// and above every key of the chunks before it; `len` is the sum of the chunks' lengths. The
/// chunk list is a sorted `Vec` (a binary search finds a key's chunk): with chunks of 512 to
/// 1,024 entries, a million entries make a list of about 1,500.
#[derive(Clone)]
pub struct CowMap<K, V> {
    chunks: Vec<Chunk<K, V>>,
    len: usize,
}

impl<K, V> Default for CowMap<K, V> {
    fn default() -> Self {
        CowMap { chunks: Vec::new(), len: 0 }
    }
}

/// A chunk to change: copied first if a clone shares it.
fn own<K: Clone, V: Clone>(chunk: &mut Arc<BTreeMap<K, V>>) -> &mut BTreeMap<K, V> {
    Arc::make_mut(chunk)
}

impl<K: Ord + Clone, V: Clone> CowMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The index of the chunk that holds or would hold `key`, if any chunk could (`None`: the
    /// key is below every chunk).
    #[inline]
    fn chunk_of(&self, key: &K) -> Option<usize> {
        // Ids are given in increasing order, so the newest entries, the ones most often
        // looked up, are in the last chunk: one comparison finds it.
        let last = self.chunks.len().checked_sub(1)?;
        if self.chunks[last].0 <= *key {
            return Some(last);
        }
        self.chunks[..last].partition_point(|(first, _)| first <= key).checked_sub(1)
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: &K) -> Option<&V> {
        self.chunks[self.chunk_of(key)?].1.get(key)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// The value of `key`, to change: copies its chunk if a clone shares it (and only if the
    /// key is there).
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let at = self.chunk_of(key)?;
        let chunk = &mut self.chunks[at].1;
        if Arc::strong_count(chunk) > 1 && !chunk.contains_key(key) {
            return None;
        }
        own(chunk).get_mut(key)
    }

    /// The chunk `key` goes in, made ready for it (a key below every chunk re-keys the first);
    /// `None` when there are no chunks.
    fn chunk_for_insert(&mut self, key: &K) -> Option<usize> {
        match self.chunk_of(key) {
            Some(at) => Some(at),
            None if self.chunks.is_empty() => None,
            None => {
                self.chunks[0].0 = key.clone();
                Some(0)
            }
        }
    }

    /// Splits chunk `at` in halves if it grew past the maximum.
    fn split_if_full(&mut self, at: usize) {
        let chunk = &mut self.chunks[at].1;
        if chunk.len() <= CHUNK_MAX {
            return;
        }
        let chunk = own(chunk);
        let middle = chunk.keys().nth(chunk.len() / 2).expect("more than one entry").clone();
        let upper = chunk.split_off(&middle);
        self.chunks.insert(at + 1, (middle, Arc::new(upper)));
    }

    /// Inserts `value` at `key`; returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let Some(at) = self.chunk_for_insert(&key) else {
            self.chunks.push((key.clone(), Arc::new(BTreeMap::from([(key, value)]))));
            self.len = 1;
            return None;
        };
        let replaced = own(&mut self.chunks[at].1).insert(key, value);
        if replaced.is_none() {
            self.len += 1;
            self.split_if_full(at);
        }
        replaced
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let at = self.chunk_of(key)?;
        let chunk = &mut self.chunks[at].1;
        if Arc::strong_count(chunk) > 1 && !chunk.contains_key(key) {
            return None;
        }
        let chunk = own(chunk);
        let removed = chunk.remove(key)?;
        if chunk.is_empty() {
            self.chunks.remove(at);
        }
        self.len -= 1;
        Some(removed)
    }

    /// The value of `key`, inserting `make()` first when absent.
    pub fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let Some(mut at) = self.chunk_for_insert(&key) else {
            self.insert(key.clone(), make());
            return own(&mut self.chunks[0].1).get_mut(&key).expect("inserted above");
        };
        if self.chunks[at].1.len() >= CHUNK_MAX && !self.chunks[at].1.contains_key(&key) {
            // Split before inserting, so that the entry is found in one place below.
            let chunk = own(&mut self.chunks[at].1);
            let middle = chunk.keys().nth(chunk.len() / 2).expect("more than one entry").clone();
            let upper = chunk.split_off(&middle);
            self.chunks.insert(at + 1, (middle, Arc::new(upper)));
            at = self.chunk_of(&key).expect("the key's chunk is still there");
        }
        let len = &mut self.len;
        own(&mut self.chunks[at].1).entry(key).or_insert_with(|| {
            *len += 1;
            make()
        })
    }

    /// The smallest entry.
    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        self.chunks.first()?.1.first_key_value()
    }

    /// The largest entry.
    pub fn last_key_value(&self) -> Option<(&K, &V)> {
        self.chunks.last()?.1.last_key_value()
    }

    /// Removes and returns the smallest entry.
    pub fn pop_first(&mut self) -> Option<(K, V)> {
        let chunk = own(&mut self.chunks.first_mut()?.1);
        let popped = chunk.pop_first();
        if chunk.is_empty() {
            self.chunks.remove(0);
        }
        self.len -= usize::from(popped.is_some());
        popped
    }

    /// Every entry in key order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        self.into_iter()
    }

    /// Every key in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + Clone + '_ {
        self.iter().map(|(key, _)| key)
    }

    /// Every value in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + Clone + '_ {
        self.iter().map(|(_, value)| value)
    }

    /// Every value in key order, to change: copies every shared chunk.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> + '_ {
        self.chunks.iter_mut().flat_map(|(_, chunk)| own(chunk).values_mut())
    }

    /// The entries whose keys fall in `range`, in order.
    pub fn range<R: RangeBounds<K>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_ {
        let bounds = owned_bounds(&range);
        let span = self.chunk_span(&bounds);
        self.chunks[span].iter().flat_map(move |(_, chunk)| chunk.range(bounds.clone()))
    }

    /// The entries whose keys fall in `range`, in order, to change: copies the shared chunks
    /// that hold any.
    pub fn range_mut<R: RangeBounds<K>>(
        &mut self,
        range: R,
    ) -> impl Iterator<Item = (&K, &mut V)> + '_ {
        let bounds = owned_bounds(&range);
        let span = self.chunk_span(&bounds);
        self.chunks[span].iter_mut().flat_map(move |(_, chunk)| {
            // Copy only a chunk that holds something in range.
            let touched = chunk.range(bounds.clone()).next().is_some();
            touched.then(|| own(chunk).range_mut(bounds.clone())).into_iter().flatten()
        })
    }

    /// Keeps only the entries `keep` says yes to; copies the shared chunks it removes from.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let mut removed = 0;
        for (_, chunk) in &mut self.chunks {
            // `keep` is asked once per entry, as `BTreeMap::retain` does.
            let decisions: Vec<bool> = chunk.iter().map(|(key, value)| keep(key, value)).collect();
            if decisions.iter().all(|&kept| kept) {
                continue;
            }
            let mut decided = decisions.into_iter();
            let chunk = own(chunk);
            let before = chunk.len();
            chunk.retain(|_, _| decided.next().unwrap_or(true));
            removed += before - chunk.len();
        }
        self.len -= removed;
        self.chunks.retain(|(_, chunk)| !chunk.is_empty());
    }

    /// Removes every entry whose key falls in `range`.
    pub fn remove_range<R: RangeBounds<K>>(&mut self, range: R) {
        let keys: Vec<K> = self.range(range).map(|(key, _)| key.clone()).collect();
        for key in &keys {
            self.remove(key);
        }
    }

    /// The chunks that may hold keys within `bounds`.
    fn chunk_span(&self, (start, end): &(Bound<K>, Bound<K>)) -> std::ops::Range<usize> {
        let from = match start {
            Bound::Included(key) | Bound::Excluded(key) => self.chunk_of(key).unwrap_or(0),
            Bound::Unbounded => 0,
        };
        let to = match end {
            Bound::Included(key) => self.chunks.partition_point(|(first, _)| first <= key),
            Bound::Excluded(key) => self.chunks.partition_point(|(first, _)| first < key),
            Bound::Unbounded => self.chunks.len(),
        };
        from..to.max(from)
    }
}

fn owned_bounds<K: Clone, R: RangeBounds<K>>(range: &R) -> (Bound<K>, Bound<K>) {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

impl<K: Ord + Clone, V: Clone> std::ops::Index<&K> for CowMap<K, V> {
    type Output = V;

    /// The value of `key`; panics when absent, as a `BTreeMap` does.
    fn index(&self, key: &K) -> &V {
        self.get(key).expect("no entry found for key")
    }
}

/// The entries of one chunk.
type ChunkIter<'a, K, V> = std::collections::btree_map::Iter<'a, K, V>;

/// A chunk and the key it is filed under.
type Chunk<K, V> = (K, Arc<BTreeMap<K, V>>);

/// The entries of a chunk, in order.
type ChunkEntries<'a, K, V> = fn(&'a Chunk<K, V>) -> ChunkIter<'a, K, V>;

/// Every entry of a [`CowMap`] in key order.
pub type Iter<'a, K, V> = std::iter::FlatMap<
    std::slice::Iter<'a, Chunk<K, V>>,
    ChunkIter<'a, K, V>,
    ChunkEntries<'a, K, V>,
>;

impl<'a, K: Ord + Clone, V: Clone> IntoIterator for &'a CowMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        let entries: ChunkEntries<'a, K, V> = |(_, chunk)| chunk.iter();
        self.chunks.iter().flat_map(entries)
    }
}

/// A `BTreeSet` in shared chunks: a [`CowMap`] to `()`, encoded as the set's sequence.
#[derive(Clone)]
pub struct CowSet<T> {
    map: CowMap<T, ()>,
}

impl<T> Default for CowSet<T> {
    fn default() -> Self {
        CowSet { map: CowMap::default() }
    }
}

impl<'a, T: Ord + Clone> IntoIterator for &'a CowSet<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Map<Iter<'a, T, ()>, fn((&'a T, &'a ())) -> &'a T>;

    fn into_iter(self) -> Self::IntoIter {
        let member: fn((&'a T, &'a ())) -> &'a T = |(value, ())| value;
        (&self.map).into_iter().map(member)
    }
}

impl<T: Ord + Clone> PartialEq for CowSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<T: Ord + Clone> Eq for CowSet<T> {}

impl<T: Ord + Clone> CowSet<T> {
    /// An empty set.
    pub fn new() -> Self {
        CowSet { map: CowMap::new() }
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Adds `value`; whether it was new.
    pub fn insert(&mut self, value: T) -> bool {
        self.map.insert(value, ()).is_none()
    }

    /// Removes `value`; whether it was there.
    pub fn remove(&mut self, value: &T) -> bool {
        self.map.remove(value).is_some()
    }

    /// Whether `value` is a member.
    pub fn contains(&self, value: &T) -> bool {
        self.map.contains_key(value)
    }

    /// The smallest member.
    pub fn first(&self) -> Option<&T> {
        self.map.first_key_value().map(|(value, _)| value)
    }

    /// The largest member.
    pub fn last(&self) -> Option<&T> {
        self.map.last_key_value().map(|(value, _)| value)
    }

    /// Removes and returns the smallest member.
    pub fn pop_first(&mut self) -> Option<T> {
        self.map.pop_first().map(|(value, ())| value)
    }

    /// Every member in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + Clone + '_ {
        self.map.keys()
    }

    /// The members in `range`, in order.
    pub fn range<R: RangeBounds<T>>(&self, range: R) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.map.range(range).map(|(value, _)| value)
    }

    /// Keeps only the members `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.map.retain(|value, ()| keep(value));
    }
}

impl<T: Ord + Clone> FromIterator<T> for CowSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        CowSet { map: values.into_iter().map(|value| (value, ())).collect() }
    }
}

impl<T: Ord + Clone> From<std::collections::BTreeSet<T>> for CowSet<T> {
    fn from(set: std::collections::BTreeSet<T>) -> Self {
        set.into_iter().collect()
    }
}

impl<T: Ord + Clone + fmt::Debug> fmt::Debug for CowSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl<T: Ord + Clone + Serialize> Serialize for CowSet<T> {
    /// Exactly as a `BTreeSet` with the same members.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for value in self.iter() {
            seq.serialize_element(value)?;
        }
        seq.end()
    }
}

impl<'de, T: Ord + Clone + Deserialize<'de>> Deserialize<'de> for CowSet<T> {
    /// Whatever a `BTreeSet` with the same members would decode.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        std::collections::BTreeSet::deserialize(deserializer).map(CowSet::from)
    }
}

impl<K: Ord + Clone, V: Clone> FromIterator<(K, V)> for CowMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let sorted: BTreeMap<K, V> = entries.into_iter().collect();
        CowMap::from(sorted)
    }
}

impl<K: Ord + Clone, V: Clone> From<BTreeMap<K, V>> for CowMap<K, V> {
    /// Chunks of half the maximum, so that the next inserts do not split at once.
    fn from(sorted: BTreeMap<K, V>) -> Self {
        let len = sorted.len();
        let mut chunks = Vec::new();
        let mut current = BTreeMap::new();
        let mut first = None;
        for (key, value) in sorted {
            if current.len() == CHUNK_MAX / 2 {
                let full = std::mem::take(&mut current);
                chunks.push((first.take().expect("a full chunk has a first key"), Arc::new(full)));
            }
            if current.is_empty() {
                first = Some(key.clone());
            }
            current.insert(key, value);
        }
        if let Some(first) = first {
            chunks.push((first, Arc::new(current)));
        }
        CowMap { chunks, len }
    }
}

impl<K: Ord + Clone, V: Clone + PartialEq> PartialEq for CowMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<K: Ord + Clone, V: Clone + Eq> Eq for CowMap<K, V> {}

impl<K: Ord + Clone + fmt::Debug, V: Clone + fmt::Debug> fmt::Debug for CowMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Ord + Clone + Serialize, V: Clone + Serialize> Serialize for CowMap<K, V> {
    /// Exactly as a `BTreeMap` with the same entries.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.len))?;
        for (key, value) in self.iter() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de, K, V> Deserialize<'de> for CowMap<K, V>
where
    K: Ord + Clone + Deserialize<'de>,
    V: Clone + Deserialize<'de>,
{
    /// Whatever a `BTreeMap` with the same entries would decode.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(deserializer).map(CowMap::from)
    }
}

/// A vector that grows past nothing: its length is fixed when it is made, like a show's seats.
/// Elements live in shared chunks of [`VEC_CHUNK`] (the last one shorter), so a clone shares
/// every chunk and a write copies only the chunk it lands in. Reads cost a shift and one more
/// indirection than a `Vec`'s.
///
/// It iterates and encodes exactly like a `Vec` with the same elements, so the snapshot bytes do
/// not depend on the chunking.
#[derive(Clone)]
pub struct CowVec<T> {
    /// Every chunk but the last holds exactly `VEC_CHUNK` elements; none is empty.
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

/// Elements per chunk of a [`CowVec`]: a power of two, so finding an element's chunk is a
/// shift. At 4,096 seats of 16 bytes a chunk is 64 KB, and a 100,000-seat show is 25 chunks.
pub(crate) const VEC_CHUNK: usize = 4096;

impl<T> Default for CowVec<T> {
    fn default() -> Self {
        CowVec { chunks: Vec::new(), len: 0 }
    }
}

impl<T: Clone> CowVec<T> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The element at `index`, if any.
    pub fn get(&self, index: usize) -> Option<&T> {
        self.chunks.get(index / VEC_CHUNK).and_then(|chunk| chunk.get(index % VEC_CHUNK))
    }

    /// The element at `index` to change, if any: its chunk is copied first if a clone shares it.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.chunks
            .get_mut(index / VEC_CHUNK)
            .and_then(|chunk| Arc::make_mut(chunk).get_mut(index % VEC_CHUNK))
    }

    /// Every element in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + Clone + '_ {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }
}

impl<T: Clone> From<Vec<T>> for CowVec<T> {
    fn from(elements: Vec<T>) -> Self {
        let len = elements.len();
        if len <= VEC_CHUNK {
            let chunks = if len == 0 { Vec::new() } else { vec![Arc::new(elements)] };
            return CowVec { chunks, len };
        }
        let chunks = elements.chunks(VEC_CHUNK).map(|chunk| Arc::new(chunk.to_vec())).collect();
        CowVec { chunks, len }
    }
}

impl<T: Clone> FromIterator<T> for CowVec<T> {
    fn from_iter<I: IntoIterator<Item = T>>(elements: I) -> Self {
        CowVec::from(elements.into_iter().collect::<Vec<T>>())
    }
}

impl<T: Clone> std::ops::Index<usize> for CowVec<T> {
    type Output = T;

    /// The element at `index`; panics when out of bounds, as a `Vec` does.
    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(element) => element,
            None => panic!("index {index} out of bounds for a CowVec of {}", self.len),
        }
    }
}

impl<T: Clone> std::ops::IndexMut<usize> for CowVec<T> {
    /// The element at `index` to change (its chunk copied first if shared); panics when out of
    /// bounds, as a `Vec` does.
    fn index_mut(&mut self, index: usize) -> &mut T {
        let len = self.len;
        match self.get_mut(index) {
            Some(element) => element,
            None => panic!("index {index} out of bounds for a CowVec of {len}"),
        }
    }
}

impl<T: Clone + PartialEq> PartialEq for CowVec<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: Clone + Eq> Eq for CowVec<T> {}

impl<T: Clone + fmt::Debug> fmt::Debug for CowVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Clone + Serialize> Serialize for CowVec<T> {
    /// Exactly as a `Vec` with the same elements.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.len))?;
        for element in self.iter() {
            seq.serialize_element(element)?;
        }
        seq.end()
    }
}

impl<'de, T: Clone + Deserialize<'de>> Deserialize<'de> for CowVec<T> {
    /// Whatever a `Vec` with the same elements would decode.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(CowVec::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator (the crate has no rand dependency by design).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }

    fn check_shape(map: &CowMap<u64, u64>) {
        let mut previous: Option<u64> = None;
        let mut total = 0;
        for (first, chunk) in &map.chunks {
            assert!(!chunk.is_empty(), "an empty chunk at {first}");
            assert!(chunk.len() <= CHUNK_MAX, "a chunk of {} at {first}", chunk.len());
            assert!(chunk.keys().all(|key| key >= first), "chunk {first} holds a smaller key");
            if let Some(previous) = previous {
                assert!(*first > previous, "chunk {first} overlaps the one before");
            }
            previous = chunk.keys().next_back().copied();
            total += chunk.len();
        }
        assert_eq!(total, map.len());
    }

    #[test]
    fn behaves_like_a_btreemap_under_random_operations() {
        let mut rng = Lcg(7);
        let mut cow = CowMap::new();
        let mut model = BTreeMap::new();
        let mut kept = Vec::new();
        for step in 0..60_000u64 {
            let key = rng.next(5_000);
            match rng.next(10) {
                0..=3 => assert_eq!(cow.insert(key, step), model.insert(key, step)),
                4..=5 => assert_eq!(cow.remove(&key), model.remove(&key)),
                6 => {
                    *cow.get_or_insert_with(key, || step) += 1;
                    *model.entry(key).or_insert(step) += 1;
                }
                7 => {
                    if let Some(value) = cow.get_mut(&key) {
                        *value += 1;
                    }
                    if let Some(value) = model.get_mut(&key) {
                        *value += 1;
                    }
                }
                8 => assert_eq!(cow.pop_first(), model.pop_first()),
                _ => {
                    let (low, high) = (key, key + rng.next(700));
                    let got: Vec<_> = cow.range(low..high).collect();
                    let want: Vec<_> = model.range(low..high).collect();
                    assert_eq!(got, want, "range {low}..{high}");
                    let got: Vec<_> = cow.range(..=low).rev().take(3).collect();
                    let want: Vec<_> = model.range(..=low).rev().take(3).collect();
                    assert_eq!(got, want, "range ..={low}");
                }
            }
            if step % 1_000 == 0 {
                check_shape(&cow);
            }
            if step % 5_000 == 0 {
                // A clone shares everything; later writes to either side must not leak across.
                kept.push((cow.clone(), model.clone()));
            }
            assert_eq!(cow.get(&key), model.get(&key));
        }
        check_shape(&cow);
        assert!(cow.iter().eq(model.iter()));
        assert_eq!(cow.first_key_value(), model.first_key_value());
        assert_eq!(cow.last_key_value(), model.last_key_value());
        for (cow, model) in &kept {
            check_shape(cow);
            assert!(cow.iter().eq(model.iter()), "a clone changed after its original was written");
        }
    }

    #[test]
    fn range_mut_retain_and_remove_range_match_a_btreemap() {
        let mut cow: CowMap<u64, u64> = (0..3_000).map(|key| (key * 3, key)).collect();
        let mut model: BTreeMap<u64, u64> = (0..3_000).map(|key| (key * 3, key)).collect();
        let shared = cow.clone();
        for (_, value) in cow.range_mut(1_000..=2_000) {
            *value += 10;
        }
        for (_, value) in model.range_mut(1_000..=2_000) {
            *value += 10;
        }
        assert!(cow.iter().eq(model.iter()));
        cow.retain(|key, _| key % 2 == 0);
        model.retain(|key, _| key % 2 == 0);
        assert!(cow.iter().eq(model.iter()));
        cow.remove_range(4_000..7_000);
        model.retain(|key, _| !(4_000..7_000).contains(key));
        assert!(cow.iter().eq(model.iter()));
        check_shape(&cow);
        for value in cow.values_mut() {
            *value = 0;
        }
        assert!(
            shared
                .iter()
                .map(|(key, value)| (*key, *value))
                .eq((0..3_000).map(|key| (key * 3, key)))
        );
    }

    #[test]
    fn a_write_after_a_clone_copies_one_chunk() {
        let mut cow: CowMap<u64, u64> = (0..10_000).map(|key| (key, key)).collect();
        let shared = cow.clone();
        *cow.get_mut(&5_000).expect("present") = 1;
        let copied = cow
            .chunks
            .iter()
            .zip(&shared.chunks)
            .filter(|((_, chunk), (_, before))| !Arc::ptr_eq(chunk, before))
            .count();
        assert_eq!(copied, 1);
        assert_eq!(shared.get(&5_000), Some(&5_000));
    }

    #[test]
    fn encodes_exactly_like_a_btreemap() {
        let model: BTreeMap<u64, String> =
            (0..1_000).map(|key| (key * 7, format!("v{key}"))).collect();
        let cow: CowMap<u64, String> = model.clone().into_iter().collect();
        let bytes = postcard::to_allocvec(&cow).expect("encodes");
        assert_eq!(bytes, postcard::to_allocvec(&model).expect("encodes"));
        let back: CowMap<u64, String> = postcard::from_bytes(&bytes).expect("decodes");
        assert_eq!(back, cow);
    }

    #[test]
    fn a_cow_vec_reads_writes_and_encodes_as_a_vec_and_a_write_copies_one_chunk() {
        for len in [0, 1, VEC_CHUNK - 1, VEC_CHUNK, VEC_CHUNK + 1, 3 * VEC_CHUNK + 17] {
            let model: Vec<u64> = (0..len as u64).collect();
            let mut cow = CowVec::from(model.clone());
            assert_eq!(cow.len(), len);
            assert!(cow.iter().eq(model.iter()), "len {len}");
            assert!(cow.iter().rev().eq(model.iter().rev()), "len {len}");
            assert_eq!(cow.get(len), None);
            assert_eq!(postcard::to_allocvec(&cow).ok(), postcard::to_allocvec(&model).ok());
            let decoded: CowVec<u64> =
                postcard::from_bytes(&postcard::to_allocvec(&model).expect("encodes"))
                    .expect("decodes");
            assert_eq!(decoded, cow);
            if len == 0 {
                continue;
            }
            let view = cow.clone();
            cow[len - 1] = u64::MAX;
            *cow.get_mut(0).expect("in bounds") = u64::MAX;
            assert_eq!((view[len - 1], view[0]), ((len - 1) as u64, 0), "the view is unchanged");
            assert_eq!((cow[len - 1], cow[0]), (u64::MAX, u64::MAX));
            let shared = cow
                .chunks
                .iter()
                .zip(&view.chunks)
                .filter(|(mine, theirs)| Arc::ptr_eq(mine, theirs))
                .count();
            let written = if len <= VEC_CHUNK { 1 } else { 2 };
            assert_eq!(shared, cow.chunks.len() - written, "len {len}: only written chunks copied");
            assert!(cow.chunks.iter().all(|chunk| !chunk.is_empty()));
            assert!(cow.chunks.iter().rev().skip(1).all(|chunk| chunk.len() == VEC_CHUNK));
        }
    }
}
