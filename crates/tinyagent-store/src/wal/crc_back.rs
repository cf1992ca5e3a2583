//! CRC-32 run backwards: the lowest suffix of a buffer that has a given
//! crc, among offsets a caller picks, in one pass.
//!
//! The log's crc is CRC-32/IEEE as crc32fast and zlib compute it: a 32-bit
//! register starts at `0xffffffff`, each byte `b` moves it with
//! `r' = (r >> 8) ^ T[(r ^ b) & 0xff]` (the table `T` of the reflected
//! polynomial `0xedb88320`), and the crc is `!r` at the end.
//!
//! That byte step can be undone. The top byte of `r >> 8` is zero, so the
//! top byte of `r'` is the top byte of `T[i]` (with `i = (r ^ b) & 0xff`),
//! and the 256 entries of `T` have 256 different top bytes: `i` is read off
//! `r'` through an inverse table, then `r >> 8 = r' ^ T[i]` gives the high 24
//! bits of `r` and `i ^ b` its low 8. So, knowing the register a message
//! must end in (`!crc`), walking the buffer from its end towards its start
//! gives, at each offset `p`, the register that `data[p..]` would have to
//! start from to end there; `data[p..]` has that crc exactly when this is
//! the initial `0xffffffff`. A bounded amount of work per byte, whatever
//! the number of offsets asked about: finding the suffixes with a given crc
//! is linear, where hashing each candidate suffix on its own is quadratic.
//! (Eight bytes are undone per step of the walk, see [`unstep8`]; the
//! registers in between are worked out only where the caller asks.)
//!
//! Nothing here is used to write a log: the writer hashes forward with
//! crc32fast, and this module is tested against it.

const POLY: u32 = 0xedb8_8320;
const INIT: u32 = 0xffff_ffff;

/// The forward table: `T[i]` is the register change for index `i`.
const TABLE: [u32; 256] = forward_table();
/// `INVERSE[t]` is the `i` whose `T[i]` has top byte `t`.
const INVERSE: [u8; 256] = inverse_table(&TABLE);
/// `UNDO4[k][b]`, `UNDO8[k][b]`: the register four (eight) zero bytes
/// before one of `b << 8k`.
const UNDO4: [[u32; 256]; 4] = undo_tables(4);
const UNDO8: [[u32; 256]; 4] = undo_tables(8);

const fn forward_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut r = i as u32;
        let mut k = 0;
        while k < 8 {
            r = if r & 1 == 1 { (r >> 1) ^ POLY } else { r >> 1 };
            k += 1;
        }
        t[i] = r;
        i += 1;
    }
    t
}

const fn inverse_table(t: &[u32; 256]) -> [u8; 256] {
    let mut inv = [0u8; 256];
    let mut seen = [false; 256];
    let mut i = 0;
    while i < 256 {
        let top = (t[i] >> 24) as usize;
        // Fails the build if two entries shared a top byte (they do not).
        assert!(!seen[top], "CRC table top bytes must be distinct");
        seen[top] = true;
        inv[top] = i as u8;
        i += 1;
    }
    inv
}

const fn undo_tables(zeros: usize) -> [[u32; 256]; 4] {
    let mut t = [[0u32; 256]; 4];
    let mut k = 0;
    while k < 4 {
        let mut b = 0;
        while b < 256 {
            let mut r = (b as u32) << (8 * k);
            let mut n = 0;
            while n < zeros {
                r = unstep(r, 0);
                n += 1;
            }
            t[k][b] = r;
            b += 1;
        }
        k += 1;
    }
    t
}

/// The register after `byte`, given the register before it.
#[inline]
fn step(before: u32, byte: u8) -> u32 {
    (before >> 8) ^ TABLE[((before ^ byte as u32) & 0xff) as usize]
}

/// The register before `byte` was fed, given the register after it.
#[inline]
const fn unstep(after: u32, byte: u8) -> u32 {
    let i = INVERSE[(after >> 24) as usize];
    ((after ^ TABLE[i as usize]) << 8) | (i ^ byte) as u32
}

/// `Z⁻¹(r)` for a linear map `Z` given by `table` (one entry per byte of
/// `r`): four independent look-ups.
#[inline]
fn undo(table: &[[u32; 256]; 4], r: u32) -> u32 {
    table[0][(r & 0xff) as usize]
        ^ table[1][((r >> 8) & 0xff) as usize]
        ^ table[2][((r >> 16) & 0xff) as usize]
        ^ table[3][(r >> 24) as usize]
}

/// The register before eight bytes (`word`, little-endian: the first
/// byte lowest) were fed, given the register after them.
///
/// Feeding four bytes `w` to a register `r` gives `Z4(r ^ w)`, `Z4` the
/// linear map "feed four zero bytes"; so eight bytes `lo`, `hi` give
/// `Z4(Z4(r ^ lo) ^ hi)` and `r = Z8⁻¹(after) ^ Z4⁻¹(hi) ^ lo`. Only the
/// first term depends on `after`: one round of four look-ups per eight
/// bytes on the chain from one register to the next.
#[inline]
fn unstep8(after: u32, word: u64) -> u32 {
    let (lo, hi) = (word as u32, (word >> 32) as u32);
    undo(&UNDO8, after) ^ undo(&UNDO4, hi) ^ lo
}

/// The lowest offset `p` in `lo..data.len()` with `data[p] == lead`,
/// `wanted(p)` and `crc32(data[p..]) == crc`, found in one backward pass
/// over `data[lo..]` in constant memory. `lead` is a byte that every
/// offset `wanted` accepts holds; `wanted` is asked only about offsets
/// that hold it, from the highest down.
///
/// The pass undoes eight bytes at a time ([`unstep8`]), which gives the
/// register at every eighth offset; the register at an offset in between
/// is computed (at most four steps from the nearer of the two around it)
/// only for the offsets `wanted` accepts. Each byte costs a bounded amount
/// of work, whatever the data.
pub fn lowest_suffix_with_crc(
    data: &[u8],
    lo: usize,
    crc: u32,
    lead: u8,
    mut wanted: impl FnMut(usize) -> bool,
) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let lo = lo.min(data.len());
    let mut best = None;
    // The register `data[q..]` must start from to end with `crc`.
    let mut reg = !crc;
    let mut q = data.len();
    while q - lo >= 8 {
        q -= 8;
        let block: [u8; 8] = data[q..q + 8].try_into().expect("eight bytes");
        let word = u64::from_le_bytes(block);
        let above = reg;
        reg = unstep8(reg, word);
        // A high bit per byte that may be `lead` (the usual zero-byte
        // test: exact for the lowest such byte, maybe not above it).
        let x = word ^ (ONES * u64::from(lead));
        let mut maybe = x.wrapping_sub(ONES) & !x & HIGHS;
        while maybe != 0 {
            let k = 7 - (maybe.leading_zeros() / 8) as usize;
            maybe &= !(0x80 << (8 * k));
            if block[k] == lead && wanted(q + k) {
                // From the nearer known register: at most four steps
                // forward from the one below, or three back from the one
                // above.
                let at = if k <= 4 {
                    block[..k].iter().fold(reg, |r, &b| step(r, b))
                } else {
                    block[k..].iter().rev().fold(above, |r, &b| unstep(r, b))
                };
                if at == INIT {
                    best = Some(q + k);
                }
            }
        }
    }
    while q > lo {
        q -= 1;
        reg = unstep(reg, data[q]);
        if data[q] == lead && wanted(q) && reg == INIT {
            best = Some(q);
        }
    }
    best
}

/// Four bytes that, appended to `prefix`, give a block whose crc is 0: a
/// block that leaves the register where it found it (at the initial
/// value), so `crc32(block || w) == crc32(w)` for every `w`. Lets tests build
/// pieces where several embedded candidates pass the crc check.
///
/// Undoing four steps from the initial register, the four bytes land
/// only in the low bits of each step (the table indices do not depend on
/// them), so the register that must precede them is `C ^ bytes` for a
/// constant `C`: the bytes are that register's difference from `C`.
#[cfg(test)]
pub(crate) fn crc_zeroing_bytes(prefix: &[u8]) -> [u8; 4] {
    let after_prefix = !crc32fast::hash(prefix);
    let c = (0..4).fold(INIT, |r, _| unstep(r, 0));
    (after_prefix ^ c).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift64*), enough for test data.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn bytes(&mut self, n: usize, alphabet: &[u8]) -> Vec<u8> {
            (0..n)
                .map(|_| alphabet[(self.next() % alphabet.len() as u64) as usize])
                .collect()
        }
    }

    #[test]
    fn the_table_is_the_one_crc32fast_uses() {
        for i in 0..=255u8 {
            // One byte from a zero register: the table entry, crc-wise.
            let mut h = crc32fast::Hasher::new_with_initial(!0);
            h.update(&[i]);
            assert_eq!(!h.finalize(), TABLE[usize::from(i)]);
        }
    }

    #[test]
    fn unstep_undoes_a_forward_step() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..10_000 {
            let r = rng.next() as u32;
            let b = rng.next() as u8;
            let after = (r >> 8) ^ TABLE[((r ^ u32::from(b)) & 0xff) as usize];
            assert_eq!(unstep(after, b), r);
        }
    }

    #[test]
    fn unstep8_undoes_eight_forward_steps() {
        let mut rng = Rng(3);
        for _ in 0..10_000 {
            let r = rng.next() as u32;
            let w = rng.next();
            let after = w.to_le_bytes().iter().fold(r, |r, &b| step(r, b));
            assert_eq!(unstep8(after, w), r);
        }
    }

    #[test]
    fn finds_the_lowest_suffix_crc32fast_agrees_with() {
        let mut rng = Rng(42);
        for round in 0..2000 {
            let n = (rng.next() % 80) as usize;
            // A tiny alphabet makes repeated suffix content likely.
            let data = rng.bytes(n, if round % 2 == 0 { b"ab" } else { b"{\"seq:}" });
            let lo = (rng.next() % (n as u64 + 2)) as usize;
            // Ask about the crc of some real suffix, or of nothing in particular.
            let crc = if n > 0 && round % 3 != 0 {
                crc32fast::hash(&data[(rng.next() % n as u64) as usize..])
            } else {
                rng.next() as u32
            };
            let every = (rng.next() % 3) as usize + 1;
            let lead = data.get(n / 2).copied().unwrap_or(b'a');
            let wanted = |p: usize| p.is_multiple_of(every);
            let want = (lo.min(n)..n)
                .find(|&p| data[p] == lead && wanted(p) && crc32fast::hash(&data[p..]) == crc);
            let got = lowest_suffix_with_crc(&data, lo, crc, lead, wanted);
            assert_eq!(got, want, "round {round}: {data:?} lo {lo} crc {crc:08x}");
            // `wanted` is asked about each offset holding `lead` once,
            // highest first.
            let mut asked = Vec::new();
            lowest_suffix_with_crc(&data, lo, crc, lead, |p| {
                asked.push(p);
                false
            });
            let holding = (lo.min(n)..n).rev().filter(|&p| data[p] == lead);
            assert!(asked.iter().copied().eq(holding), "{asked:?}");
        }
    }

    #[test]
    fn zeroing_bytes_make_a_block_of_crc_zero() {
        let mut rng = Rng(7);
        for n in 0..200 {
            let mut block = rng.bytes(n, b"{\"seq:}ab");
            block.extend_from_slice(&crc_zeroing_bytes(&block));
            assert_eq!(crc32fast::hash(&block), 0, "{block:?}");
            let mut glued = block.clone();
            glued.extend_from_slice(b"anything");
            assert_eq!(crc32fast::hash(&glued), crc32fast::hash(b"anything"));
        }
    }

    #[test]
    fn a_long_suffix_is_found_at_its_start_only() {
        let data = vec![b'x'; 100_000];
        let crc = crc32fast::hash(&data[17..]);
        assert_eq!(
            lowest_suffix_with_crc(&data, 0, crc, b'x', |_| true),
            Some(17)
        );
        assert_eq!(lowest_suffix_with_crc(&data, 18, crc, b'x', |_| true), None);
        assert_eq!(lowest_suffix_with_crc(&data, 0, crc, b'y', |_| true), None);
    }
}
