//! Gives back the memory of cells' libraries that the cell process no longer reads. evcxr never
//! unloads a cell's library (a value a cell made may point into it), and loading one reads its
//! symbol and relocation tables: about 1.3 MB of RSS per cell, file pages that are not read
//! again. `MADV_PAGEOUT` reclaims a range's pages while keeping its content (clean file pages
//! are dropped and read back from the file if touched again; written private pages stay
//! unless there is swap), so it is safe for any mapping, the running code's included.

/// Pages out the read-only mappings of cell libraries (`libcode_N.so`, evcxr's name for them);
/// returns how many mappings were advised.
pub fn trim_cell_libraries() -> usize {
    trim_mappings(|path| path.contains("/libcode_"))
}

/// Pages out the mappings (not writable) whose path `wanted` accepts.
fn trim_mappings(wanted: impl Fn(&str) -> bool) -> usize {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return 0 };
    let mut advised = 0;
    for line in maps.lines() {
        // `start-end perms offset dev inode path`
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
        let path = fields.nth(3).unwrap_or("").trim_start();
        if perms.contains('w') || !wanted(path) {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16)) else {
            continue;
        };
        // SAFETY: the range is a whole mapping of this process as the kernel lists it; PAGEOUT
        // changes no content (a kernel without it answers EINVAL, which is ignored).
        let r = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_PAGEOUT) };
        if r == 0 {
            advised += 1;
        }
    }
    advised
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// Resident kB of the mapping starting at `addr`, from /proc/self/smaps.
    fn rss_kb(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{addr:x}-");
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&head));
        lines.next().expect("the mapping is listed");
        let rss = lines.find(|l| l.starts_with("Rss:")).unwrap();
        rss.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn a_read_mapping_is_paged_out_and_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("libcode_7.so");
        let data: Vec<u8> = (0..4 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: a private read-only mapping of a file this test owns, unmapped below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                data.len(),
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        // SAFETY: the mapping is data.len() readable bytes.
        let mapped = unsafe { std::slice::from_raw_parts(ptr as *const u8, data.len()) };
        assert_eq!(mapped, &data[..]);
        let before = rss_kb(ptr as usize);
        assert!(before >= 4000, "{before} kB resident after reading it all");
        let wanted = path.to_string_lossy().into_owned();
        assert_eq!(trim_mappings(|p| p == wanted), 1);
        let after = rss_kb(ptr as usize);
        assert!(after < before / 4, "{after} kB resident after the trim (was {before})");
        assert_eq!(mapped, &data[..], "the content reads back the same");
        // SAFETY: unmapping what this test mapped; `mapped` is not used after.
        unsafe { libc::munmap(ptr, data.len()) };
    }
}
