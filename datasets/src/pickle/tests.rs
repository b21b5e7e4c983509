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
