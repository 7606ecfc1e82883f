//! The compile cache's capacity bound: least recently used keys go first, and a key that was
//! evicted compiles again. (Its own test binary: it changes the process-wide capacity.)

use eager::prelude::*;

fn has(sig: &str) -> bool {
    cache::entries().iter().any(|e| e.info.signature() == sig)
}

#[test]
fn capacity_evicts_least_recently_used_and_clear_empties() -> Result<()> {
    cache::set_capacity(3);
    let t = |n: usize| Tensor::from_slice(&vec![1.0f32; n], &[n]);
    let (a, b, c, d) = (t(2)?, t(3)?, t(4)?, t(5)?);
    a.exp()?;
    b.exp()?;
    c.exp()?;
    a.exp()?; // a is now more recent than b
    d.exp()?; // over capacity: b (least recently used) goes
    let s = cache::stats();
    assert_eq!((s.entries, s.evictions), (3, 1));
    assert!(has("exp(f32[2])") && has("exp(f32[4])") && has("exp(f32[5])"));
    assert!(!has("exp(f32[3])"));

    // The evicted key is fetched again (compiled, or loaded from the disk cache: not a
    // memory hit), and still computes right.
    let fetched = |s: cache::CacheStats| s.misses + s.disk_hits;
    let before = fetched(cache::stats());
    assert_eq!(b.exp()?.to_vec::<f32>()?, vec![1f32.exp(); 3]);
    assert_eq!(fetched(cache::stats()), before + 1);

    cache::clear();
    let s = cache::stats();
    assert_eq!((s.entries, s.hits, s.misses, s.disk_hits, s.capacity), (0, 0, 0, 0, 3));
    a.exp()?;
    assert_eq!(fetched(cache::stats()), 1);
    Ok(())
}
