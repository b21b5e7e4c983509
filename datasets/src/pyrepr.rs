//! Python's `str()` and `repr()` of unpickled values, as f-strings print them (STaRK documents
//! embed dict/list reprs and float reprs byte for byte).

use crate::pickle::Value;

/// `str(v)`: strings as they are, everything else as `repr`.
pub fn py_str(v: &Value) -> String {
    match v.plain() {
        Value::Str(s) => s.clone(),
        other => py_repr(other),
    }
}

/// `repr(v)`.
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(v.plain(), &mut out);
    out
}

fn write_repr(v: &Value, out: &mut String) {
    match v {
        Value::None => out.push_str("None"),
        Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(f) => out.push_str(&float_repr(*f)),
        Value::Str(s) => out.push_str(&str_repr(s)),
        Value::Bytes(b) => {
            out.push('b');
            out.push_str(&str_repr(&b.iter().map(|&c| c as char).collect::<String>()));
        }
        Value::List(items) => seq(items, "[", "]", out),
        Value::Tuple(items) if items.len() == 1 => {
            out.push('(');
            write_repr(items[0].plain(), out);
            out.push_str(",)");
        }
        Value::Tuple(items) => seq(items, "(", ")", out),
        Value::Set(items) if items.is_empty() => out.push_str("set()"),
        Value::Set(items) => seq(items, "{", "}", out),
        Value::Dict(pairs) => {
            out.push('{');
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(k.plain(), out);
                out.push_str(": ");
                write_repr(v.plain(), out);
            }
            out.push('}');
        }
        Value::Numpy(inner) => write_repr(inner, out),
        Value::Tensor(t) => out.push_str(&format!("tensor(<{} {:?}>)", t.dtype, t.size)),
    }
}

fn seq(items: &[Value], open: &str, close: &str, out: &mut String) {
    out.push_str(open);
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_repr(x.plain(), out);
    }
    out.push_str(close);
}

/// `repr(float)`: the shortest round-trip digits, fixed notation for exponents in [-4, 16),
/// scientific (`1e-05`, `1.5e+16`) otherwise, `.0` for integral values.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "d.ddde±x".
    let sci = format!("{:e}", f.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let s = if exp >= 0 {
            let int_len = exp + 1;
            if n <= int_len {
                format!("{digits}{}.0", "0".repeat((int_len - n) as usize))
            } else {
                format!("{}.{}", &digits[..int_len as usize], &digits[int_len as usize..])
            }
        } else {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        };
        format!("{sign}{s}")
    } else {
        let m = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        let es = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    }
}

/// `repr(str)`: single quotes unless the text has `'` and no `"`; escapes as CPython.
pub fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if is_printable(c) => out.push(c),
            c => {
                let cp = c as u32;
                if cp < 0x100 {
                    out.push_str(&format!("\\x{cp:02x}"));
                } else if cp < 0x10000 {
                    out.push_str(&format!("\\u{cp:04x}"));
                } else {
                    out.push_str(&format!("\\U{cp:08x}"));
                }
            }
        }
    }
    out.push(quote);
    out
}

/// CPython's `str.isprintable` for one character, approximated by Unicode general categories
/// that Rust exposes: control characters, separators other than the ASCII space, and the
/// format/private-use/unassigned code points this data can hold are not printable.
fn is_printable(c: char) -> bool {
    let cp = c as u32;
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    // Zs/Zl/Zp other than ' ' are covered by is_whitespace; Cf (format) characters:
    !matches!(cp, 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF | 0xD800..=0xDFFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        // Expected strings are what CPython 3.11 prints for repr(x).
        for (x, want) in [
            (180.0, "180.0"),
            (1e-05, "1e-05"),
            (0.0001, "0.0001"),
            (0.1, "0.1"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (12345678901234567.0, "1.2345678901234568e+16"),
            (3.14159e-7, "3.14159e-07"),
            (100.0, "100.0"),
            (0.30000000000000004, "0.30000000000000004"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn str_and_container_repr_match_python() {
        assert_eq!(str_repr("it's"), "\"it's\"");
        assert_eq!(str_repr("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(str_repr("tab\there\n"), "'tab\\there\\n'");
        assert_eq!(str_repr("é ü 日本"), "'é ü 日本'");
        assert_eq!(str_repr("\u{7}\u{a0}"), "'\\x07\\xa0'");
        let v = Value::Dict(vec![
            (Value::Str("a".into()), Value::List(vec![Value::Int(1), Value::Float(2.0), Value::None, Value::Bool(true)])),
            (Value::Int(3), Value::Tuple(vec![Value::Str("x".into())])),
        ]);
        assert_eq!(py_repr(&v), "{'a': [1, 2.0, None, True], 3: ('x',)}");
        assert_eq!(py_str(&Value::Str("plain".into())), "plain");
        assert_eq!(py_str(&Value::Numpy(Box::new(Value::Float(4.0)))), "4.0");
    }
}
