//! Hand-assembled pickles (byte sequences as CPython writes them) and forbidden globals.

use super::*;

#[test]
fn memoised_list_sees_later_appends_and_dict_keeps_python_semantics() -> Result<(), PickleError> {
    // x = []; d = {'a': x, 'b': x}; x.append(1) — written as EMPTY_LIST MEMOIZE, then appended.
    // protocol 4: } ( a ] MEMOIZE  b GET0 u ... simplified by hand:
    let mut p = vec![0x80, 4, b'}'];
    p.extend([b'(', 0x8c, 1, b'a', b']', 0x94, 0x8c, 1, b'b', b'h', 0, b'u']);
    // append 1 to the memoised list and put it on the dict again under 'a' (duplicate key keeps position)
    p.extend([b'h', 0, b'K', 1, b'a', b'0']);
    p.extend([0x8c, 1, b'a', b'h', 0, b's', b'.']);
    let v = load(&p)?;
    let l = Value::List(vec![Value::Int(1)]);
    assert_eq!(v, Value::Dict(vec![(Value::Str("a".into()), l.clone()), (Value::Str("b".into()), l)]));
    Ok(())
}

#[test]
fn integers_floats_and_numpy_scalars() -> Result<(), PickleError> {
    // LONG1 -2 (0xfe), BININT -5, BINFLOAT 1.5 big endian, numpy.float64 scalar via STACK_GLOBAL.
    let mut p = vec![0x80, 4, b'('];
    p.extend([0x8a, 1, 0xfe]);
    p.push(b'J');
    p.extend((-5i32).to_le_bytes());
    p.push(b'G');
    p.extend(1.5f64.to_be_bytes());
    p.extend([0x8c, 21]);
    p.extend(b"numpy.core.multiarray");
    p.extend([0x8c, 6]);
    p.extend(b"scalar");
    p.push(0x93);
    p.extend([0x8c, 5]);
    p.extend(b"numpy");
    p.extend([0x8c, 5]);
    p.extend(b"dtype");
    p.push(0x93);
    p.extend([0x8c, 2]);
    p.extend(b"f8");
    p.extend([0x89, 0x88, 0x87, b'R']);
    p.extend([b'(', b'K', 3, 0x8c, 1, b'<', b'N', b'N', b'N', b'J']);
    p.extend((-1i32).to_le_bytes());
    p.push(b'J');
    p.extend((-1i32).to_le_bytes());
    p.extend([b'K', 0, b't', b'b']);
    p.extend([b'C', 8]);
    p.extend(4.0f64.to_le_bytes());
    p.extend([0x86, b'R', b'l', b'.']);
    let v = load(&p)?;
    assert_eq!(v, Value::List(vec![Value::Int(-2), Value::Int(-5), Value::Float(1.5), Value::Numpy(Box::new(Value::Float(4.0)))]));
    Ok(())
}

#[test]
fn forbidden_globals_and_truncation_fail_without_running_anything() {
    for (module, name) in [("os", "system"), ("builtins", "eval"), ("subprocess", "Popen"), ("numpy", "load")] {
        let mut p = vec![b'c'];
        p.extend(module.as_bytes());
        p.push(b'\n');
        p.extend(name.as_bytes());
        p.extend(b"\n(S'x'\ntR.");
        let e = load(&p).expect_err("must refuse");
        assert!(e.reason.contains(&format!("`{module}.{name}` is not allowed")), "{e}");
    }
    let e = load(&[0x80, 4, 0x8c, 10, b'a']).expect_err("truncated");
    assert!(e.reason.contains("truncated"), "{e}");
    let e = load(&[0x80, 4, b'K']).expect_err("truncated");
    assert!(e.reason.contains("truncated"), "{e}");
    let e = load(&[0x80, 4, 0x8c, 2, 0xff, 0xfe, b'.']).expect_err("utf8");
    assert!(e.reason.contains("UTF-8"), "{e}");
}

#[test]
fn protocol_2_bytes_decode_as_python_encodes_latin1_and_refuse_what_python_refuses() {
    // pickle.dumps(b'\xff\x00', protocol=2), as CPython 3 writes it: _codecs.encode('ÿ\x00', 'latin1').
    let cpython: Vec<u8> = vec![
        128, 2, 99, 95, 99, 111, 100, 101, 99, 115, 10, 101, 110, 99, 111, 100, 101, 10, 113, 0, 88, 3, 0, 0, 0, 195, 191, 0, 113, 1, 88,
        6, 0, 0, 0, 108, 97, 116, 105, 110, 49, 113, 2, 134, 113, 3, 82, 113, 4, 46,
    ];
    assert_eq!(load(&cpython), Ok(Value::Bytes(vec![0xff, 0x00])));
    // 'Ā' (U+0100, UTF-8 c4 80) in place of 'ÿ': Python raises UnicodeEncodeError; so do we, instead
    // of truncating it to 0x00.
    let mut wide = cpython.clone();
    wide[25..27].copy_from_slice(&[0xc4, 0x80]);
    let e = load(&wide).expect_err("U+0100 is not latin1");
    assert!(e.reason.contains("U+0100") && e.reason.contains("latin1"), "{e}");
    // Another codec name than latin1's (same length: `utf_16`): refused by name.
    let mut other = cpython.clone();
    other[35..41].copy_from_slice(b"utf_16");
    let e = load(&other).expect_err("utf_16");
    assert!(e.reason.contains("encoding `utf_16`"), "{e}");
    // latin1's aliases are the same codec.
    let mut alias = cpython;
    alias[35..41].copy_from_slice(b"LATIN1");
    assert_eq!(load(&alias), Ok(Value::Bytes(vec![0xff, 0x00])));
}
