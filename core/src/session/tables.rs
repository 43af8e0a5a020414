//! The session's tables: the peer's directory, what was told the peer and withdrawn from it,
//! and the acknowledgements owed.
//!
//! With the `alloc` feature they hold what is in them — a session with a peer that has eight
//! names costs a few hundred bytes of tables, not the registry's capacity — so that a process
//! with thousands of connections pays for what its peers registered. Without it they are
//! fixed arrays of `CAP` entries (heapless), as a target without an allocator needs. Either
//! way a table holds at most `CAP` entries: an insert beyond fails, as heapless's does.

use core::ops::Deref;

#[cfg(feature = "alloc")]
mod imp {
    use alloc::collections::VecDeque;
    use alloc::vec::Vec;

    /// A list of at most `N` entries, on the heap.
    #[derive(Clone, Debug)]
    pub struct List<T, const N: usize>(Vec<T>);

    impl<T, const N: usize> List<T, N> {
        pub const fn new() -> Self {
            List(Vec::new())
        }

        /// Inserts at `at` (≤ len); `Err(v)` when `N` entries are held.
        pub fn insert(&mut self, at: usize, v: T) -> Result<(), T> {
            if self.0.len() >= N {
                return Err(v);
            }
            self.0.insert(at, v);
            Ok(())
        }

        pub fn remove(&mut self, at: usize) -> T {
            self.0.remove(at)
        }

        pub fn clear(&mut self) {
            self.0 = Vec::new();
        }

        pub fn as_slice(&self) -> &[T] {
            &self.0
        }

        pub fn as_mut_slice(&mut self) -> &mut [T] {
            &mut self.0
        }

        /// Bytes on the heap (its capacity).
        pub fn heap_bytes(&self) -> usize {
            self.0.capacity() * core::mem::size_of::<T>()
        }
    }

    /// A FIFO of at most `N` entries, on the heap.
    #[derive(Debug)]
    pub struct Queue<T, const N: usize>(VecDeque<T>);

    impl<T, const N: usize> Queue<T, N> {
        pub const fn new() -> Self {
            Queue(VecDeque::new())
        }

        /// `Err(v)` when `N` entries are held.
        pub fn push_back(&mut self, v: T) -> Result<(), T> {
            if self.is_full() {
                return Err(v);
            }
            self.0.push_back(v);
            Ok(())
        }

        pub fn pop_front(&mut self) -> Option<T> {
            let v = self.0.pop_front();
            if self.0.is_empty() && self.0.capacity() > 8 {
                self.0 = VecDeque::new(); // a burst's room given back
            }
            v
        }

        pub fn front(&self) -> Option<&T> {
            self.0.front()
        }

        pub fn is_full(&self) -> bool {
            self.0.len() >= N
        }

        /// Bytes on the heap (its capacity).
        pub fn heap_bytes(&self) -> usize {
            self.0.capacity() * core::mem::size_of::<T>()
        }
    }
}

#[cfg(not(feature = "alloc"))]
mod imp {
    /// A list of at most `N` entries, inline.
    #[derive(Clone, Debug)]
    pub struct List<T, const N: usize>(heapless::Vec<T, N>);

    impl<T, const N: usize> List<T, N> {
        pub const fn new() -> Self {
            List(heapless::Vec::new())
        }

        /// Inserts at `at` (≤ len); `Err(v)` when `N` entries are held.
        pub fn insert(&mut self, at: usize, v: T) -> Result<(), T> {
            self.0.insert(at, v)
        }

        pub fn remove(&mut self, at: usize) -> T {
            self.0.remove(at)
        }

        pub fn clear(&mut self) {
            self.0.clear();
        }

        pub fn as_slice(&self) -> &[T] {
            &self.0
        }

        pub fn as_mut_slice(&mut self) -> &mut [T] {
            &mut self.0
        }

        /// Bytes on the heap: none (it is inline).
        pub fn heap_bytes(&self) -> usize {
            0
        }
    }

    /// A FIFO of at most `N` entries, inline.
    #[derive(Debug)]
    pub struct Queue<T, const N: usize>(heapless::Deque<T, N>);

    impl<T, const N: usize> Queue<T, N> {
        pub const fn new() -> Self {
            Queue(heapless::Deque::new())
        }

        /// `Err(v)` when `N` entries are held.
        pub fn push_back(&mut self, v: T) -> Result<(), T> {
            self.0.push_back(v)
        }

        pub fn pop_front(&mut self) -> Option<T> {
            self.0.pop_front()
        }

        pub fn front(&self) -> Option<&T> {
            self.0.front()
        }

        pub fn is_full(&self) -> bool {
            self.0.is_full()
        }

        /// Bytes on the heap: none (it is inline).
        pub fn heap_bytes(&self) -> usize {
            0
        }
    }
}

pub(crate) use imp::{List, Queue};

impl<T, const N: usize> Deref for List<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

/// Values by namespace id (`< N`), a missing id reading as the default value: a sorted list
/// of the ids that hold something else.
#[derive(Clone, Debug)]
pub(crate) struct IdMap<V, const N: usize>(List<(u16, V), N>);

impl<V: Copy + Default + PartialEq, const N: usize> IdMap<V, N> {
    pub const fn new() -> Self {
        IdMap(List::new())
    }

    fn find(&self, id: u16) -> Result<usize, usize> {
        self.0.binary_search_by_key(&id, |&(i, _)| i)
    }

    /// The value of `id` (the default when none was set).
    pub fn get(&self, id: u16) -> V {
        self.find(id).map_or(V::default(), |at| self.0[at].1)
    }

    /// Sets `id`'s value; the default value removes it. An id `≥ N` cannot be held (no caller
    /// has one: ids come from a registry of at most `N`, or are checked first); it is ignored.
    pub fn set(&mut self, id: u16, v: V) {
        match self.find(id) {
            Ok(at) if v == V::default() => drop(self.0.remove(at)),
            Ok(at) => self.0.as_mut_slice()[at].1 = v,
            Err(_) if v == V::default() || id as usize >= N => {}
            // At most one entry per id below N: never full.
            Err(at) => drop(self.0.insert(at, (id, v))),
        }
    }

    /// The ids holding something, in order, with their values.
    pub fn iter(&self) -> impl Iterator<Item = (u16, V)> + '_ {
        self.0.iter().copied()
    }

    /// How many ids hold something.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    /// Bytes on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.0.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_map_reads_the_default_where_nothing_is_set() {
        let mut m: IdMap<u32, 8> = IdMap::new();
        assert_eq!(m.get(3), 0);
        m.set(5, 7);
        m.set(1, 9);
        m.set(3, 0); // the default: nothing to hold
        assert_eq!(m.iter().collect::<heapless::Vec<_, 8>>(), [(1, 9), (5, 7)]);
        m.set(5, 8);
        assert_eq!((m.get(5), m.len()), (8, 2));
        m.set(5, 0);
        assert_eq!((m.get(5), m.len()), (0, 1));
        m.set(8, 1); // beyond N: cannot be held
        assert_eq!(m.len(), 1);
        m.clear();
        assert_eq!(m.len(), 0);
    }

    #[test]
    fn tables_hold_at_most_their_capacity() {
        let mut l: List<u8, 2> = List::new();
        assert!(l.insert(0, 1).is_ok() && l.insert(0, 0).is_ok());
        assert_eq!(l.insert(2, 9), Err(9));
        assert_eq!(&*l, [0, 1]);
        let mut q: Queue<u8, 2> = Queue::new();
        assert!(q.push_back(1).is_ok() && q.push_back(2).is_ok());
        assert!(q.is_full());
        assert_eq!(q.push_back(3), Err(3));
        assert_eq!((q.pop_front(), q.front()), (Some(1), Some(&2)));
    }
}
