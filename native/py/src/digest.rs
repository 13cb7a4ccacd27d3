//! Spark's `xxhash64` of an events row, for the run row of a night's state (`_state`:
//! `digest_upto_high`, the XOR of every row's hash): the Spark runner computes it with
//! `F.xxhash64("seq", "ts_ms", "argv", "db", "client", "source")`, the local runner
//! here, so that either runner's night continues the other's.
//!
//! Spark's `XxHash64` (seed 42) hashes the columns in order, each value with the hash so
//! far as its seed, and skips nulls: a long as the 8 bytes of XXH64's `hashLong`, an int
//! as the 4 of `hashInt`, a string as its UTF-8 bytes, an array element by element. Each
//! of those is the standard XXH64 of the value's little-endian bytes.

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

/// Spark's seed of `xxhash64`.
pub const SPARK_SEED: u64 = 42;

fn word(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(s) = data.get(at..at + 8) {
        b.copy_from_slice(s);
    }
    u64::from_le_bytes(b)
}

fn half(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 4];
    if let Some(s) = data.get(at..at + 4) {
        b.copy_from_slice(s);
    }
    u64::from(u32::from_le_bytes(b))
}

fn round(acc: u64, input: u64) -> u64 {
    acc.wrapping_add(input.wrapping_mul(P2))
        .rotate_left(31)
        .wrapping_mul(P1)
}

fn merge(acc: u64, val: u64) -> u64 {
    (acc ^ round(0, val)).wrapping_mul(P1).wrapping_add(P4)
}

/// The standard XXH64 of `data` with `seed`.
pub fn xxh64(data: &[u8], seed: u64) -> u64 {
    let len = data.len();
    let mut at = 0;
    let mut h = if len >= 32 {
        let mut v = [
            seed.wrapping_add(P1).wrapping_add(P2),
            seed.wrapping_add(P2),
            seed,
            seed.wrapping_sub(P1),
        ];
        while at + 32 <= len {
            for (i, lane) in v.iter_mut().enumerate() {
                *lane = round(*lane, word(data, at + 8 * i));
            }
            at += 32;
        }
        let mut h = v[0]
            .rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18));
        for lane in v {
            h = merge(h, lane);
        }
        h
    } else {
        seed.wrapping_add(P5)
    };
    h = h.wrapping_add(len as u64);
    while at + 8 <= len {
        h ^= round(0, word(data, at));
        h = h.rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
        at += 8;
    }
    if at + 4 <= len {
        h ^= half(data, at).wrapping_mul(P1);
        h = h.rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
        at += 4;
    }
    while at < len {
        h ^= u64::from(data.get(at).copied().unwrap_or(0)).wrapping_mul(P5);
        h = h.rotate_left(11).wrapping_mul(P1);
        at += 1;
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

/// One value of a row, as Spark hashes it.
pub enum Value<'a> {
    Long(Option<i64>),
    Int(Option<i32>),
    Str(Option<&'a str>),
    Strs(Option<&'a [Option<&'a str>]>),
}

/// Spark's `xxhash64` of a row's values (nulls skipped), as the signed long Spark gives.
pub fn spark_hash(values: &[Value<'_>]) -> i64 {
    let mut h = SPARK_SEED;
    for value in values {
        match value {
            Value::Long(Some(v)) => h = xxh64(&v.to_le_bytes(), h),
            Value::Int(Some(v)) => h = xxh64(&v.to_le_bytes(), h),
            Value::Str(Some(s)) => h = xxh64(s.as_bytes(), h),
            Value::Strs(Some(items)) => {
                for s in items.iter().flatten() {
                    h = xxh64(s.as_bytes(), h);
                }
            }
            _ => {}
        }
    }
    h as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_vectors() {
        // the reference implementation's values (xxhsum -H64)
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"a", 0), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
        assert_eq!(
            xxh64(b"Nobody inspects the spammish repetition", 0),
            0xFBCE_A83C_8A37_8BF1
        );
    }
}
