//! The names and keys of rendezvous, derived from the job's secret (a root info's session key)
//! with a keyed hash, so that nobody without the key can compute them.
//!
//! A hub's socket name is public once bound: every local user can list it in
//! `/proc/net/unix`. What must not be public is the name of a rendezvous yet to come, since
//! whoever binds a name first holds it: a sub-communicator's name used to be the global name
//! and a plain hash of the sub-communicator's name, which anyone could compute from the
//! listing and bind ahead of the members. Every name and key here is SipHash-2-4 (a
//! pseudo-random function of its 128-bit key, Aumasson and Bernstein, 2012) of a label and the
//! public inputs under the session key: without the key, the outputs are unpredictable.

/// SipHash-2-4 of `data` under `key`.
fn siphash24(key: &[u8; 16], data: &[u8]) -> u64 {
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
    let (k0, k1) = (word(&key[..8]), word(&key[8..]));
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let chunks = data.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        let m = word(chunk);
        v[3] ^= m;
        rounds(&mut v, 2);
        v[0] ^= m;
    }
    // The last word: the remaining bytes, and the length's low byte on top.
    let mut last = [0u8; 8];
    last[..tail.len()].copy_from_slice(tail);
    let m = word(&last) | ((data.len() as u64) << 56);
    v[3] ^= m;
    rounds(&mut v, 2);
    v[0] ^= m;
    v[2] ^= 0xff;
    rounds(&mut v, 4);
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// `n` SipRounds on the state `v`.
fn rounds(v: &mut [u64; 4], n: usize) {
    for _ in 0..n {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
}

/// 128 pseudo-random bits of `label` and `data` under `key`: two SipHash outputs of inputs
/// that differ in their first byte, the label and the data separated by its length.
fn derive(key: &[u8; 16], label: &str, data: &[u8]) -> u128 {
    let mut input = vec![0u8];
    input.extend((label.len() as u32).to_le_bytes());
    input.extend(label.as_bytes());
    input.extend(data);
    let low = siphash24(key, &input);
    input[0] = 1;
    let high = siphash24(key, &input);
    (u128::from(high) << 64) | u128::from(low)
}

/// The socket name of the hub of a root info with `session`, made by process `pid`.
///
/// The pid is kept so that a process's sockets can be told apart in `/proc/net/unix` (tests
/// look for those a job left behind); it tells nobody anything usable: another user can
/// neither signal nor trace the process, and sees the name go when it dies anyway. The rest
/// is derived from the key, so the name cannot be predicted and bound before the hub starts.
pub(crate) fn global_name(pid: u32, session: &[u8; 16]) -> String {
    let tag = derive(session, "global hub", &[]);
    format!("symheap-emu-{pid:x}-{tag:032x}")
}

/// Where the members of sub-communicator `name` of the group whose hub is `global` (with
/// `session`) meet: their hub's socket name and session key, both derived from `session`.
pub(crate) fn sub_meeting(global: &str, session: &[u8; 16], name: &[u8]) -> (String, [u8; 16]) {
    let tag = derive(session, "sub-communicator hub", name);
    let key = derive(session, "sub-communicator key", name);
    (format!("{global}-sub-{tag:032x}"), key.to_le_bytes())
}

/// The key under which a rank-table job's meeting is derived. Public: a rank table is no
/// secret (every rank reads it from a file), so this only makes the name and key a hash of
/// the table; what keeps other users out of such a job is the uid check on both sides of the
/// socket ([`crate::ipc::hub`], [`crate::ipc::rendezvous`]), not the key.
const RANK_TABLE_KEY: [u8; 16] = *b"symheap-rank-tbl";

/// Where the ranks of a rank-table job of user `uid` meet: a socket name and a session key
/// derived from the table's canonical contents (`table`), so that every rank of the job, each
/// reading its own copy of the table, computes the same ones, and jobs of other tables or
/// other users meet elsewhere.
pub(crate) fn rank_table_meeting(uid: u32, table: &[u8]) -> (String, [u8; 16]) {
    let mut data = uid.to_le_bytes().to_vec();
    data.extend(table);
    let tag = derive(&RANK_TABLE_KEY, "rank-table hub", &data);
    let key = derive(&RANK_TABLE_KEY, "rank-table key", &data);
    (
        format!("symheap-emu-rt-{uid:x}-{tag:032x}"),
        key.to_le_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference vectors of the SipHash paper (appendix A): key 00..0f, messages
    /// 00..(len - 1).
    #[test]
    fn siphash_matches_the_reference_vectors() {
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let message: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(&key, &[]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(&key, &message[..8]), 0x93f5_f579_9a93_2462);
        assert_eq!(siphash24(&key, &message), 0xa129_ca61_49be_45e5);
    }

    /// Names and keys depend on the session key: another key (an outsider's guess) gives
    /// others, and a sub-communicator's key is not the global one.
    #[test]
    fn names_and_keys_depend_on_the_session_key() {
        let (a, b) = ([1u8; 16], [2u8; 16]);
        assert_ne!(global_name(7, &a), global_name(7, &b));
        assert!(global_name(7, &a).starts_with("symheap-emu-7-"));
        let global = global_name(7, &a);
        let (name_a, key_a) = sub_meeting(&global, &a, b"g_sub_5");
        let (name_b, key_b) = sub_meeting(&global, &b, b"g_sub_5");
        assert_ne!((&name_a, key_a), (&name_b, key_b));
        assert_ne!(key_a, a);
        assert_ne!(sub_meeting(&global, &a, b"g_sub_6").0, name_a);
        // Within an abstract socket name's 107 bytes, for the longest pid.
        assert!(sub_meeting(&global_name(u32::MAX, &a), &a, b"x").0.len() <= 107);
    }

    /// A rank-table job's meeting depends on the table and the user, and its name fits an
    /// abstract socket's.
    #[test]
    fn rank_table_meetings_differ_by_table_and_user() {
        let (name, key) = rank_table_meeting(1000, b"table a");
        assert_eq!(rank_table_meeting(1000, b"table a"), (name.clone(), key));
        assert_ne!(rank_table_meeting(1000, b"table b").0, name);
        assert_ne!(rank_table_meeting(1001, b"table a").0, name);
        assert_ne!(rank_table_meeting(1000, b"table b").1, key);
        assert!(name.starts_with("symheap-emu-rt-3e8-"));
        assert!(rank_table_meeting(u32::MAX, b"x").0.len() <= 107);
    }
}
