//! The parser's and the encoder's tests.

use super::*;

#[test]
fn replies_in_resp2_and_resp3() {
    let enc = |r: &Reply, p| {
        let mut out = BytesMut::new();
        r.encode_as(&mut out, p);
        String::from_utf8(out.to_vec()).unwrap()
    };
    let map = Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]);
    assert_eq!(enc(&map, Proto::Resp2), "*2\r\n$1\r\na\r\n:1\r\n");
    assert_eq!(enc(&map, Proto::Resp3), "%1\r\n$1\r\na\r\n:1\r\n");
    let nested = Reply::Array(vec![Reply::Nil, Reply::bulk("x")]);
    assert_eq!(enc(&nested, Proto::Resp2), "*2\r\n$-1\r\n$1\r\nx\r\n");
    assert_eq!(enc(&nested, Proto::Resp3), "*2\r\n_\r\n$1\r\nx\r\n");
    let raw_nil = Reply::Raw(Bytes::from_static(b"$-1\r\n"));
    assert_eq!(enc(&raw_nil, Proto::Resp3), "_\r\n");
    let raw_ok = Reply::Raw(Bytes::from_static(b"+OK\r\n"));
    assert_eq!(enc(&raw_ok, Proto::Resp3), "+OK\r\n");
}

/// A state machine response re-encodes to exactly what the reply itself encodes to, in
/// both protocols, however it nests; bytes that do not parse pass unchanged.
#[test]
fn responses_transcode_to_either_protocol() {
    let enc = |r: &Reply, p| {
        let mut out = BytesMut::new();
        r.encode_as(&mut out, p);
        out
    };
    let pairs = Reply::Pairs(vec![
        (Reply::bulk("m"), Reply::double(1.5)),
        (Reply::bulk("n"), Reply::double(f64::INFINITY)),
    ]);
    let replies = [
        Reply::Nil,
        Reply::NilArray,
        Reply::Int(-3),
        Reply::double(2.0),
        pairs.clone(),
        Reply::Array(vec![
            pairs,
            Reply::Map(vec![(Reply::bulk("f"), Reply::Nil)]),
            Reply::Set(vec![Reply::bulk("a")]),
            Reply::NilArray,
            Reply::Raw(Bytes::from_static(b"+PONG\r\n")),
            Reply::Error("WRONGTYPE x".into()),
        ]),
    ];
    for r in &replies {
        let response = r.to_response();
        for p in [Proto::Resp2, Proto::Resp3] {
            let mut out = BytesMut::new();
            transcode(&response, p, &mut out);
            assert_eq!(out, enc(r, p), "{r:?} in {p:?}");
        }
    }
    let mut out = BytesMut::new();
    transcode(b"*3\r\n:1\r\n", Proto::Resp3, &mut out);
    assert_eq!(
        &out[..],
        b"*3\r\n:1\r\n",
        "a truncated array passes unchanged"
    );
    assert_eq!(format_double(1.0), "1");
    assert_eq!(format_double(-2.5), "-2.5");
    assert_eq!(format_double(1e20), "1e+20");
    assert_eq!(format_double(f64::NEG_INFINITY), "-inf");
}

fn parse_all(input: &[u8], limits: Limits) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
    let mut p = Parser::new(limits);
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    while let Some(cmd) = p.next(&mut buf)? {
        out.push(cmd);
    }
    Ok(out)
}

#[test]
fn multibulk_and_inline_commands_parse() {
    let cmds = parse_all(
        b"*2\r\n$4\r\nECHO\r\n$4\r\na\r\nb\r\nPING\r\n  set  k v \n*0\r\n",
        Limits::default(),
    )
    .unwrap();
    assert_eq!(cmds.len(), 3);
    assert_eq!(cmds[0], vec![Bytes::from("ECHO"), Bytes::from("a\r\nb")]);
    assert_eq!(cmds[1], vec![Bytes::from("PING")]);
    assert_eq!(cmds[2].len(), 3);
}

#[test]
fn byte_by_byte_input_gives_the_same_commands() {
    let input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\nPING\r\n";
    let mut p = Parser::new(Limits::default());
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for &b in input.iter() {
        buf.put_u8(b);
        while let Some(cmd) = p.next(&mut buf).unwrap() {
            got.push(cmd);
        }
    }
    assert_eq!(got.len(), 2);
    assert_eq!(got[0][2], Bytes::from("hello"));
}

#[test]
fn a_request_arriving_in_small_pieces_is_walked_once() {
    // 3,000 one-byte arguments sent one byte at a time: each argument header is parsed
    // about once (plus one retry per arrival at most), not once per arrival for every
    // argument before it; an inline request is searched once for its newline.
    let args = 3_000;
    let mut input = format!("*{args}\r\n").into_bytes();
    for _ in 0..args {
        input.extend_from_slice(b"$1\r\nx\r\n");
    }
    input.extend_from_slice(&[b'a'; 5_000]);
    input.extend_from_slice(b" b\r\n");
    let mut p = Parser::new(Limits::default());
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for &b in input.iter() {
        buf.put_u8(b);
        while let Some(cmd) = p.next(&mut buf).unwrap() {
            got.push(cmd.len());
        }
    }
    assert_eq!(got, vec![args, 2]);
    assert!(
        p.work <= 2 * input.len(),
        "work {} for {} bytes",
        p.work,
        input.len()
    );
}

#[test]
fn oversized_and_malformed_input_is_refused() {
    let small = Limits {
        bulk_bytes_max: 4,
        array_len_max: 2,
        inline_bytes_max: 8,
        request_bytes_max: 5,
    };
    for bad in [
        &b"*3\r\n"[..],
        b"*1\r\n$5\r\n",
        b"*2\r\n$3\r\nabc\r\n$3\r\ndef\r\n",
        b"*1\r\n:3\r\n",
        b"*x\r\n",
        b"*1\r\n$-5\r\n",
        b"*1\r\n$2\r\nabXY",
        b"0123456789",
        b"*1\r\n$99999999999999999999999\r\n",
    ] {
        assert!(
            parse_all(bad, small).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    // A cheap deterministic fuzz: every prefix and a scramble of a valid stream.
    let base = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n*1\r\n$4\r\nPING\r\n".to_vec();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..2000 {
        let mut input = base.clone();
        for _ in 0..(round % 7) {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
            let i = (state >> 33) as usize % input.len();
            input[i] = (state >> 11) as u8;
        }
        input.truncate(round % (input.len() + 1));
        let _ = parse_all(&input, Limits::default());
    }
}

#[test]
fn replies_encode_as_resp2() {
    let r = Reply::Array(vec![
        Reply::ok(),
        Reply::Int(-3),
        Reply::bulk("x"),
        Reply::Nil,
        Reply::err("bad\r\nthing"),
    ]);
    assert_eq!(
        &r.to_bytes()[..],
        b"*5\r\n+OK\r\n:-3\r\n$1\r\nx\r\n$-1\r\n-ERR bad  thing\r\n"
    );
}
