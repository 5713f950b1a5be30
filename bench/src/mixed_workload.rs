//! The cluster suite's mixed workload: what a web application asks of a Redis that keeps its
//! sessions in hashes and a leaderboard in a sorted set.
//!
//! Out of every 100 requests:
//! * 50 `HGETALL s<n>`: a request reads its session (4 fields);
//! * 20 `HSET s<n> user .. last_seen .. page .. cart ..`: a request rewrites its session;
//! * 20 `ZINCRBY leaderboard <1..10> p<n>`: a player scores;
//! * 10 `ZREVRANGE leaderboard 0 9 WITHSCORES`: the top ten are shown.
//!
//! 60 % reads, 40 % writes. Sessions are drawn uniformly from the key space, players from
//! [`PLAYERS`]; [`preload`] creates every session and player first, so that every read finds
//! data of its final shape.

use std::time::Duration;

use crate::resp_load::{encode, reply_text, Conn, Rng};

/// The request kinds, in the order of [`request`]'s return value.
pub const KINDS: [&str; 4] = ["HGETALL", "HSET", "ZINCRBY", "ZREVRANGE"];

/// Out of 100 requests, how many are of each kind (same order as [`KINDS`]).
pub const MIX_PERCENT: [u64; 4] = [50, 20, 20, 10];

/// Members of the leaderboard.
pub const PLAYERS: u64 = 1_000;

/// The sorted set every leaderboard request touches.
const LEADERBOARD: &[u8] = b"leaderboard";

/// An 8-byte key or member: `prefix` and seven digits.
fn name(prefix: u8, n: u64) -> [u8; 8] {
    let mut k = crate::resp_load::key(n);
    k[0] = prefix;
    k
}

/// Appends one request drawn from the mix to `out` and returns its kind (an index into
/// [`KINDS`]). `cart` is the value of the session's largest field.
pub fn request(rng: &mut Rng, sessions: u64, cart: &[u8], out: &mut Vec<u8>) -> usize {
    let roll = rng.next() % 100;
    let mut bound = 0;
    let kind = MIX_PERCENT
        .iter()
        .position(|p| {
            bound += p;
            roll < bound
        })
        .unwrap_or(0);
    let session = name(b's', rng.next() % sessions);
    match kind {
        0 => encode(out, &[b"HGETALL", &session]),
        1 => {
            let user = (rng.next() % 1_000_000).to_string();
            let seen = (1_700_000_000 + rng.next() % 100_000_000).to_string();
            let page = format!("/p/{}", rng.next() % 500);
            encode(
                out,
                &[
                    b"HSET",
                    &session,
                    b"user",
                    user.as_bytes(),
                    b"last_seen",
                    seen.as_bytes(),
                    b"page",
                    page.as_bytes(),
                    b"cart",
                    cart,
                ],
            );
        }
        2 => {
            let by = (1 + rng.next() % 10).to_string();
            let player = name(b'p', rng.next() % PLAYERS);
            encode(out, &[b"ZINCRBY", LEADERBOARD, by.as_bytes(), &player]);
        }
        _ => encode(out, &[b"ZREVRANGE", LEADERBOARD, b"0", b"9", b"WITHSCORES"]),
    }
    kind
}

/// Creates sessions `0..sessions` (every field set) and every player with score 0 through
/// `port`, in pipelines; any error reply fails it.
pub async fn preload(port: u16, sessions: u64, cart: &[u8]) -> Result<(), String> {
    let mut conn = Conn::connect(port, Duration::from_secs(5)).await?;
    let members: Vec<[u8; 8]> = (0..PLAYERS).map(|n| name(b'p', n)).collect();
    let mut zadd: Vec<&[u8]> = vec![b"ZADD", LEADERBOARD];
    for m in &members {
        zadd.push(b"0");
        zadd.push(m);
    }
    check(conn.pipeline(&[zadd], Duration::from_secs(30)).await?)?;
    let mut n = 0;
    while n < sessions {
        let keys: Vec<[u8; 8]> = (n..sessions.min(n + 256)).map(|n| name(b's', n)).collect();
        let cmds: Vec<Vec<&[u8]>> = keys
            .iter()
            .map(|k| {
                vec![
                    &b"HSET"[..],
                    &k[..],
                    b"user",
                    b"0",
                    b"last_seen",
                    b"0",
                    b"page",
                    b"/",
                    b"cart",
                    cart,
                ]
            })
            .collect();
        check(conn.pipeline(&cmds, Duration::from_secs(30)).await?)?;
        n += keys.len() as u64;
    }
    Ok(())
}

fn check(replies: Vec<(bool, Vec<u8>)>) -> Result<(), String> {
    match replies.into_iter().find(|(is_error, _)| *is_error) {
        Some((_, raw)) => Err(format!("mixed preload: {}", reply_text(&raw))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp_load::reply_len;

    /// The drawn kinds follow the stated mix, and every request is one well-formed command of
    /// the kind returned.
    #[test]
    fn requests_follow_the_stated_mix() {
        let mut rng = Rng(42);
        let mut counts = [0u64; 4];
        let draws = 20_000;
        for _ in 0..draws {
            let mut out = Vec::new();
            let kind = request(&mut rng, 100, b"cart", &mut out);
            counts[kind] += 1;
            assert_eq!(
                reply_len(&out).unwrap().map(|(len, _)| len),
                Some(out.len())
            );
            let text = String::from_utf8_lossy(&out);
            assert!(text.contains(KINDS[kind]), "{text:?} is a {}", KINDS[kind]);
        }
        for (count, percent) in counts.iter().zip(MIX_PERCENT) {
            let expected = draws * percent / 100;
            assert!(
                count.abs_diff(expected) < draws / 50,
                "{counts:?} against {MIX_PERCENT:?} %"
            );
        }
        assert_eq!(MIX_PERCENT.iter().sum::<u64>(), 100);
    }
}
