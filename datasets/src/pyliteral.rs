//! Python literals as `ast.literal_eval` reads them (dict, list, tuple, str, int, float, True,
//! False, None), converted to JSON values. Nothing is evaluated: any other token is an error. Used by
//! MoR's plan files (`mor_plans`) and McAuley's Epinions review lines (`tag::reviews`).

use serde_json::Value;

/// A Python literal (`ast.literal_eval` subset: dict, list, tuple, str, int, float, True, False, None)
/// as JSON.
pub fn python_literal(s: &str) -> std::result::Result<Value, String> {
    let mut p = Lit { s: s.as_bytes(), src: s, i: 0 };
    let v = p.value()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!(
            "unexpected text at byte {}: `{}`",
            p.i,
            crate::raw::quote(&s.get(p.i..).unwrap_or_default().chars().take(20).collect::<String>())
        ));
    }
    Ok(v)
}

struct Lit<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
}

impl Lit<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn seq(&mut self, close: u8) -> std::result::Result<Vec<Value>, String> {
        let mut out = Vec::new();
        loop {
            if self.eat(close) {
                return Ok(out);
            }
            out.push(self.value()?);
            if !self.eat(b',') {
                return if self.eat(close) { Ok(out) } else { Err(format!("expected `,` or `{}` at byte {}", close as char, self.i)) };
            }
        }
    }
    fn value(&mut self) -> std::result::Result<Value, String> {
        self.ws();
        let Some(&c) = self.s.get(self.i) else { return Err("unexpected end of the literal".into()) };
        match c {
            b'{' => {
                self.i += 1;
                let mut m = serde_json::Map::new();
                loop {
                    if self.eat(b'}') {
                        return Ok(Value::Object(m));
                    }
                    let k = match self.value()? {
                        Value::String(k) => k,
                        other => return Err(format!("dict key {other} is not a string")),
                    };
                    if !self.eat(b':') {
                        return Err(format!("expected `:` at byte {}", self.i));
                    }
                    let v = self.value()?;
                    m.insert(k, v);
                    if !self.eat(b',') {
                        return if self.eat(b'}') { Ok(Value::Object(m)) } else { Err(format!("expected `,` or `}}` at byte {}", self.i)) };
                    }
                }
            }
            b'[' => {
                self.i += 1;
                Ok(Value::Array(self.seq(b']')?))
            }
            b'(' => {
                self.i += 1;
                Ok(Value::Array(self.seq(b')')?))
            }
            b'\'' | b'"' => self.string(c),
            _ => {
                let start = self.i;
                while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric() || b"+-._".contains(&self.s[self.i])) {
                    self.i += 1;
                }
                let tok = &self.src[start..self.i];
                match tok {
                    "None" => Ok(Value::Null),
                    "True" => Ok(Value::Bool(true)),
                    "False" => Ok(Value::Bool(false)),
                    _ => {
                        if let Ok(i) = tok.parse::<i64>() {
                            Ok(Value::from(i))
                        } else if let Ok(f) = tok.parse::<f64>() {
                            Ok(serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number))
                        } else {
                            Err(format!("`{}` at byte {start} is not a literal", crate::raw::quote(tok)))
                        }
                    }
                }
            }
        }
    }
    fn string(&mut self, q: u8) -> std::result::Result<Value, String> {
        let start = self.i;
        self.i += 1;
        let mut out = String::new();
        loop {
            let rest = &self.src[self.i..];
            let Some(c) = rest.chars().next() else { return Err(format!("string opened at byte {start} is never closed")) };
            self.i += c.len_utf8();
            match c {
                c if c as u32 == q as u32 => return Ok(Value::String(out)),
                '\\' => {
                    let Some(e) = self.src[self.i..].chars().next() else { return Err("dangling `\\`".into()) };
                    self.i += e.len_utf8();
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        '0' => out.push('\0'),
                        '\\' | '\'' | '"' => out.push(e),
                        'x' | 'u' | 'U' => {
                            let n = match e {
                                'x' => 2,
                                'u' => 4,
                                _ => 8,
                            };
                            let hex = self.src.get(self.i..self.i + n).ok_or("truncated escape")?;
                            let code = u32::from_str_radix(hex, 16).map_err(|_| format!("bad escape `\\{e}{hex}`"))?;
                            out.push(char::from_u32(code).ok_or(format!("escape `\\{e}{hex}` is not a character"))?);
                            self.i += n;
                        }
                        other => {
                            out.push('\\');
                            out.push(other);
                        }
                    }
                }
                c => out.push(c),
            }
        }
    }
}
