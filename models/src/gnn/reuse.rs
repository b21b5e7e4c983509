//! Large buffers handed from one training step to the next, per thread.
//!
//! A GraphQA step on WebQSP-sized graphs (16 graphs, 16,000 nodes, 64,000 edges) allocates and
//! frees tens of buffers of 6–65 MB: node states, queries, keys, values, their gradients, and gt2's
//! per-edge states. glibc maps blocks above its threshold (at most 32 MB) straight from the kernel
//! and trims the top of its heap above twice that, so such buffers kept coming back as fresh
//! pages: `perf` counted 1.36 M page faults (5.4 s of system time on two threads) in the default
//! run's `gretriever` stage. Here the steps' buffers are given back when their caches are dropped
//! ([`give`]) and taken again by requests of a similar size ([`zeros`], [`copy`],
//! [`with_capacity`]).
//!
//! Memory stays within what the buffers in use need: a request that no kept buffer fits first
//! frees kept buffers, oldest first, at least as large as it in all, so the bytes in use plus
//! those kept grow only when nothing is kept, never above the most in use at once. A buffer
//! serves requests of four fifths of its capacity up (a reused buffer's pages beyond the request
//! stay resident: that is the memory this costs, a few per cent). Buffers are kept only while a
//! [`Scope`] is open on the thread (a training holds one on the thread that runs it; outside one
//! [`give`] drops them), and freed when it closes. Their contents never reach a result: [`zeros`]
//! clears and [`copy`] overwrites every value.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

/// The smallest buffer kept (1 MiB of f32); smaller ones are the allocator's.
pub const MIN_FLOATS: usize = 1 << 18;

thread_local! {
    /// Kept buffers, oldest first.
    static FREE: RefCell<VecDeque<Vec<f32>>> = const { RefCell::new(VecDeque::new()) };
    /// How many [`Scope`]s are open on this thread.
    static OPEN: Cell<usize> = const { Cell::new(0) };
}

/// The kept buffer that fits `len` best (the smallest capacity of at least `len`, at most a
/// quarter more); when none does, kept buffers of at least `len` values in all are freed, oldest
/// first.
fn take(len: usize) -> Option<Vec<f32>> {
    if len < MIN_FLOATS {
        return None;
    }
    FREE.with_borrow_mut(|free| {
        let fits = |v: &Vec<f32>| v.capacity() >= len && v.capacity() - len <= len / 4;
        let best = free.iter().enumerate().filter(|(_, v)| fits(v)).min_by_key(|(_, v)| v.capacity()).map(|(i, _)| i);
        if let Some(i) = best {
            return free.remove(i);
        }
        let mut freed = 0;
        while freed < len {
            match free.pop_front() {
                Some(v) => freed += v.capacity(),
                None => break,
            }
        }
        None
    })
}

/// An empty vector with room for `len` values, a kept buffer when one fits.
pub fn with_capacity(len: usize) -> Vec<f32> {
    match take(len) {
        Some(mut v) => {
            v.clear();
            v
        }
        None => Vec::with_capacity(len),
    }
}

/// `len` zeros, in a kept buffer when one fits (else `vec!`, whose zeroed allocation the system
/// may hand over as untouched zero pages, cheaper than writing them).
pub fn zeros(len: usize) -> Vec<f32> {
    match take(len) {
        Some(mut v) => {
            v.clear();
            v.resize(len, 0.0);
            v
        }
        None => vec![0.0; len],
    }
}

/// A copy of `src`, in a kept buffer when one fits.
pub fn copy(src: &[f32]) -> Vec<f32> {
    let mut v = with_capacity(src.len());
    v.extend_from_slice(src);
    v
}

/// Keeps `v` for a later request on this thread (dropped when small or outside a [`Scope`]).
pub fn give(v: Vec<f32>) {
    if v.capacity() >= MIN_FLOATS && OPEN.get() > 0 {
        FREE.with_borrow_mut(|free| free.push_back(v));
    }
}

/// Gives back every buffer of `vs` (see [`give`]), leaving them empty.
pub fn give_all<const N: usize>(vs: [&mut Vec<f32>; N]) {
    for v in vs {
        give(std::mem::take(v));
    }
}

/// While a `Scope` is open on a thread, its buffers are kept; the last one to close frees them
/// (early returns included).
pub struct Scope(());

impl Scope {
    pub fn open() -> Scope {
        OPEN.set(OPEN.get() + 1);
        Scope(())
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        OPEN.set(OPEN.get().saturating_sub(1));
        if OPEN.get() == 0 {
            FREE.with_borrow_mut(VecDeque::clear);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The capacities this thread keeps, oldest first.
    fn kept() -> Vec<usize> {
        FREE.with_borrow(|free| free.iter().map(Vec::capacity).collect())
    }

    #[test]
    fn kept_buffers_are_reused_cleared_and_freed_for_requests_they_do_not_fit() {
        const M: usize = MIN_FLOATS;
        // Outside a scope nothing is kept.
        give(vec![0.0; M]);
        assert_eq!(kept(), Vec::<usize>::new());
        let scope = Scope::open();
        let mut v = zeros(M * 2);
        v.iter_mut().for_each(|x| *x = 7.0);
        let at = v.as_ptr();
        give(v);
        assert_eq!(kept(), [M * 2]);
        // A request of at least four fifths of the capacity takes it (here seven eighths), every
        // value zero.
        let w = zeros(M * 7 / 4);
        assert_eq!((w.as_ptr(), w.len()), (at, M * 7 / 4));
        assert!(w.iter().all(|&x| x == 0.0));
        assert_eq!(kept(), Vec::<usize>::new());
        give(w);
        let src: Vec<f32> = (0..M * 2).map(|i| i as f32).collect();
        let c = copy(&src);
        assert_eq!(c.as_ptr(), at);
        assert_eq!(c, src);
        give(c);
        let e = with_capacity(M * 2);
        assert_eq!((e.as_ptr(), e.len()), (at, 0));
        give(e);
        // The best fit: the smallest capacity that holds the request.
        give(vec![0.0; M * 3]);
        give(vec![0.0; M * 5 / 2]);
        assert_eq!(kept(), [M * 2, M * 3, M * 5 / 2]);
        let f = zeros(M * 5 / 2 - 1);
        assert_eq!(f.capacity(), M * 5 / 2);
        give(f);
        // Small buffers are never kept.
        give(vec![1.0; 16]);
        assert_eq!(kept(), [M * 2, M * 3, M * 5 / 2]);
        // A request no kept buffer fits (larger than all) frees the oldest until as much is freed
        // as it takes: M·2 + M·3 ≥ M·4.
        let g = zeros(M * 4);
        assert_eq!(kept(), [M * 5 / 2]);
        give(g);
        // So does one too small for every kept buffer: M·3/2 < 4/5 of M·5/2.
        let h = zeros(M * 3 / 2);
        assert_eq!(kept(), [M * 4]);
        drop(h);
        let i = zeros(M - 1);
        assert_eq!(kept(), [M * 4], "a request below the smallest kept size is the allocator's");
        drop(i);
        // An inner scope's end keeps them; the outer one's frees them.
        drop(Scope::open());
        assert_eq!(kept(), [M * 4]);
        drop(scope);
        assert_eq!(kept(), Vec::<usize>::new());
    }
}
