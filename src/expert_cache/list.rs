//! Index-linked doubly linked lists over a fixed arena: the O(1) building block of every policy.
//!
//! One [`Arena`] holds `prev`/`next` links for `n` nodes (slot numbers, or ghost-entry numbers);
//! any number of [`List`] heads share it, each node being in at most one list at a time. Head is
//! the most recently inserted end (MRU), tail the least (LRU). Every operation is O(1), including
//! [`Arena::append_back`], which splices a whole list onto another (the frequency-bucket merge of
//! `lfu-decay`). No `unsafe`, no pointers: indices into two `Vec<u32>`.

/// "No node".
pub(crate) const NIL: u32 = u32::MAX;

/// Links of `n` nodes.
#[derive(Debug, Clone)]
pub(crate) struct Arena {
    prev: Vec<u32>,
    next: Vec<u32>,
}

/// One list's ends and length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct List {
    head: u32,
    tail: u32,
    len: usize,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl List {
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The least recently inserted node. O(1).
    pub(crate) fn back(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }
}

impl Arena {
    pub(crate) fn new(n: usize) -> Self {
        Arena {
            prev: vec![NIL; n],
            next: vec![NIL; n],
        }
    }

    /// Inserts `i` (in no list) at the head of `l`. O(1).
    pub(crate) fn push_front(&mut self, l: &mut List, i: u32) {
        let iu = i as usize;
        self.prev[iu] = NIL;
        self.next[iu] = l.head;
        if l.head != NIL {
            self.prev[l.head as usize] = i;
        } else {
            l.tail = i;
        }
        l.head = i;
        l.len += 1;
    }

    /// Removes `i`, which must be in `l`. O(1).
    pub(crate) fn remove(&mut self, l: &mut List, i: u32) {
        let iu = i as usize;
        let (p, n) = (self.prev[iu], self.next[iu]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            l.head = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        } else {
            l.tail = p;
        }
        self.prev[iu] = NIL;
        self.next[iu] = NIL;
        l.len -= 1;
    }

    /// Removes and returns the tail (LRU end) of `l`. O(1).
    pub(crate) fn pop_back(&mut self, l: &mut List) -> Option<u32> {
        let t = l.back()?;
        self.remove(l, t);
        Some(t)
    }

    /// Moves every node of `src` behind the tail of `dst` (they become older than all of `dst`),
    /// leaving `src` empty. O(1).
    pub(crate) fn append_back(&mut self, dst: &mut List, src: &mut List) {
        if src.is_empty() {
            return;
        }
        if dst.is_empty() {
            *dst = *src;
        } else {
            self.next[dst.tail as usize] = src.head;
            self.prev[src.head as usize] = dst.tail;
            dst.tail = src.tail;
            dst.len += src.len;
        }
        *src = List::default();
    }

    /// The nodes of `l` from head to tail (tests and debugging; O(len)).
    #[cfg(test)]
    pub(crate) fn iter(&self, l: &List) -> Vec<u32> {
        let mut v = Vec::with_capacity(l.len);
        let mut i = l.head;
        while i != NIL {
            v.push(i);
            i = self.next[i as usize];
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_remove_pop_splice() {
        let mut a = Arena::new(8);
        let (mut x, mut y) = (List::default(), List::default());
        for i in 0..4 {
            a.push_front(&mut x, i);
        }
        assert_eq!(a.iter(&x), vec![3, 2, 1, 0]);
        a.remove(&mut x, 2);
        assert_eq!(a.iter(&x), vec![3, 1, 0]);
        assert_eq!(a.pop_back(&mut x), Some(0));
        a.push_front(&mut y, 5);
        a.push_front(&mut y, 6);
        a.append_back(&mut x, &mut y);
        assert_eq!(a.iter(&x), vec![3, 1, 6, 5]);
        assert_eq!(x.len(), 4);
        assert!(y.is_empty());
        a.append_back(&mut y, &mut x);
        assert_eq!(a.iter(&y), vec![3, 1, 6, 5]);
        assert_eq!(a.pop_back(&mut y), Some(5));
        assert_eq!(y.back(), Some(6));
    }
}
