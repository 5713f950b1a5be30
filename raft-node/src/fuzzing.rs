//! Properties of the RESP parser and the config loader, written once and checked by the
//! libFuzzer targets in the repository's `fuzz/` directory and by the corpus replay test
//! (`tests/fuzz_corpus.rs`). Each `check_*` takes arbitrary bytes and panics only when a
//! property fails. Allocation is measured as in `raft_core::fuzzing`.

use std::net::SocketAddr;

use bytes::{Bytes, BytesMut};
use raft_core::fuzzing::{assert_alloc_at_most, measure};

use crate::config::FileConfig;
use crate::resp::{encode_bulk, Limits, Parser};

/// Limits small enough that a fuzzer reaches every limit check with short inputs.
pub fn tight_resp_limits() -> Limits {
    Limits {
        bulk_bytes_max: 16,
        array_len_max: 4,
        inline_bytes_max: 32,
        request_bytes_max: 32,
    }
}

/// Heap bytes the parser may allocate per input byte: an inline request of one-letter words
/// costs a 16-byte range and a 32-byte `Bytes` per two input bytes, and the vectors double.
const RESP_ALLOC_PER_INPUT_BYTE: usize = 64;

/// What a parse of a stream produced: the commands, whether it ended in a protocol error,
/// and the bytes left waiting for more input.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    commands: Vec<Vec<Bytes>>,
    failed: bool,
    rest: Vec<u8>,
}

/// Feeds `data` to a parser in the pieces `chunks` cuts it into, taking every command off
/// after each piece as a connection does; stops at the first protocol error.
fn parse_in_chunks(limits: Limits, data: &[u8], chunks: &[usize]) -> Parsed {
    let mut parser = Parser::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Parsed {
        commands: Vec::new(),
        failed: false,
        rest: Vec::new(),
    };
    let mut fed = 0;
    for &n in chunks.iter().chain(std::iter::once(&usize::MAX)) {
        let end = fed + n.min(data.len() - fed);
        buf.extend_from_slice(&data[fed..end]);
        fed = end;
        loop {
            match parser.next(&mut buf) {
                Ok(Some(cmd)) => out.commands.push(cmd),
                Ok(None) => break,
                Err(_) => {
                    out.failed = true;
                    return out;
                }
            }
        }
        if fed == data.len() {
            break;
        }
    }
    out.rest = buf.to_vec();
    out
}

/// Checks the RESP parser on `data` as a client's byte stream, under the default limits and
/// under tight ones: the same commands whether the stream arrives at once, byte by byte or in
/// uneven pieces; every command within the limits; a command re-encoded as a multibulk request
/// parses back to itself; and the parse allocates in proportion to the stream.
pub fn check_resp(data: &[u8]) {
    for limits in [Limits::default(), tight_resp_limits()] {
        check_resp_with(limits, data);
    }
}

fn check_resp_with(limits: Limits, data: &[u8]) {
    let (whole, stats) = measure(|| parse_in_chunks(limits, data, &[]));
    let bound = RESP_ALLOC_PER_INPUT_BYTE * data.len() + 32 * 1024;
    assert_alloc_at_most("RESP stream", data.len(), bound, stats);

    let bytewise = parse_in_chunks(limits, data, &vec![1; data.len()]);
    assert_eq!(whole, bytewise, "feeding byte by byte changed the parse");
    // Uneven pieces from a hash of the input: deterministic, different for every input.
    let mut state = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) | 1;
    let pieces: Vec<usize> = (0..data.len())
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 7) as usize
        })
        .collect();
    let uneven = parse_in_chunks(limits, data, &pieces);
    assert_eq!(
        whole, uneven,
        "feeding in pieces {pieces:?} changed the parse"
    );

    for cmd in &whole.commands {
        assert!(!cmd.is_empty(), "an empty command was returned");
        assert!(cmd.len() <= limits.array_len_max, "too many arguments");
        let total: usize = cmd.iter().map(Bytes::len).sum();
        assert!(
            total <= limits.request_bytes_max.max(limits.inline_bytes_max),
            "a command of {total} bytes"
        );
        let arg_max = limits.bulk_bytes_max.max(limits.inline_bytes_max);
        assert!(
            cmd.iter().all(|a| a.len() <= arg_max),
            "an argument too long"
        );

        let fits_bulk = cmd.iter().all(|a| a.len() <= limits.bulk_bytes_max)
            && total <= limits.request_bytes_max;
        if fits_bulk {
            let mut encoded = BytesMut::new();
            encoded.extend_from_slice(format!("*{}\r\n", cmd.len()).as_bytes());
            for arg in cmd {
                encode_bulk(&mut encoded, arg);
            }
            let back = parse_in_chunks(limits, &encoded, &[]);
            assert_eq!(
                back.commands,
                vec![cmd.clone()],
                "a command re-encoded as multibulk parsed differently"
            );
            assert!(!back.failed && back.rest.is_empty());
        }
    }
}

/// Checks the config loader on `data` as a TOML file: parsing never panics and is
/// deterministic, accepts only TOML documents, and names a refused field on one line; a parsed
/// file whose addresses are all literal (no name lookups) is checked, and a checked one maps
/// onto raft-core's configuration without a panic.
pub fn check_config(data: &[u8]) {
    // `FileConfig::load` reads the file as UTF-8 and refuses anything else before parsing.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = FileConfig::parse(text);
    let again = FileConfig::parse(text);
    assert_eq!(
        format!("{parsed:?}"),
        format!("{again:?}"),
        "parsing is not deterministic"
    );
    let file = match parsed {
        Ok(file) => file,
        Err(e) => {
            assert!(
                !e.problem.contains('\n') && !e.field.contains('\n'),
                "an error spans lines: {e:?}"
            );
            return;
        }
    };
    let table: toml::Table = text
        .parse()
        .expect("the typed parse accepted a file that is not a TOML document");
    if !addresses_are_literal(&table) {
        return;
    }
    if let Ok(cfg) = file.check() {
        // What the node relies on once a configuration was accepted.
        assert!(!cfg.voters.is_empty(), "accepted without voters");
        assert!(
            cfg.voters.contains_key(&cfg.id) || cfg.observers.contains_key(&cfg.id),
            "accepted a replica that is neither a voter nor an observer"
        );
        assert!(
            cfg.voters.keys().all(|v| !cfg.observers.contains_key(v)),
            "accepted a replica that is both a voter and an observer"
        );
        let _ = cfg.raft_config();
    }
}

/// Whether every address in the file is an `ip:port` literal, so that checking it performs no
/// name lookup (a fuzzer must not send arbitrary host names to the resolver).
fn addresses_are_literal(table: &toml::Table) -> bool {
    let literal = |v: Option<&toml::Value>| match v {
        None => true,
        Some(toml::Value::String(s)) => s.parse::<SocketAddr>().is_ok(),
        Some(_) => true, // not a string: the typed parse refused it already
    };
    let listen_ok = match table.get("listen") {
        Some(toml::Value::Table(l)) => ["peer", "client", "metrics"]
            .iter()
            .all(|k| literal(l.get(*k))),
        _ => true,
    };
    let peers_ok = ["voters", "observers"]
        .iter()
        .all(|list| match table.get(*list) {
            Some(toml::Value::Array(entries)) => entries.iter().all(|e| match e {
                toml::Value::Table(t) => literal(t.get("peer")) && literal(t.get("client")),
                _ => true,
            }),
            _ => true,
        });
    listen_ok && peers_ok
}
