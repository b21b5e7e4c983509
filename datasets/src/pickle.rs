//! A pickle reader that never executes code.
//!
//! Python's `pickle.load` calls whatever `module.name` a file names. This reader runs the pickle
//! opcodes (protocols 2–5) on a small virtual machine whose only callables are the handful the
//! STaRK and torch files need — numpy scalar reconstruction, `numpy.dtype`, torch's
//! `_rebuild_tensor_v2` with storage persistent ids, `collections.OrderedDict`, `_codecs.encode` —
//! each rebuilt as plain data. Any other global is an error naming it.
//!
//! Objects live in an arena so that memoised containers are shared as in Python (a list memoised
//! before its items are appended still sees them).

use std::fmt;

/// A Python value as far as these files need.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// Insertion-ordered, like Python dicts.
    Dict(Vec<(Value, Value)>),
    Set(Vec<Value>),
    /// `numpy.str_` / `numpy.float64` / `numpy.bool_` / `numpy.int64` scalars: they print like the
    /// Python value, so they are kept as such, with a flag for tests that care.
    Numpy(Box<Value>),
    /// A torch tensor: storage (dtype, key, element count) and the view on it.
    Tensor(TensorRef),
}

/// What `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` describes.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorRef {
    pub dtype: String,
    pub key: String,
    pub numel: u64,
    pub offset: u64,
    pub size: Vec<u64>,
    pub stride: Vec<u64>,
}

/// Why a pickle could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct PickleError {
    pub offset: usize,
    pub reason: String,
}

/// The names Python's codec registry accepts for latin-1 (lower case, `_` as `-`).
const LATIN1_NAMES: [&str; 8] = ["latin1", "latin-1", "iso-8859-1", "iso8859-1", "8859", "cp819", "l1", "latin"];

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pickle byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for PickleError {}

#[derive(Debug, Clone)]
enum Obj {
    Val(Value),
    List(Vec<usize>),
    Tuple(Vec<usize>),
    Dict(Vec<(usize, usize)>),
    Set(Vec<usize>),
    Global(String, String),
    Dtype(String),
    Storage { dtype: String, key: String, numel: u64 },
}

struct Vm<'a> {
    data: &'a [u8],
    pos: usize,
    arena: Vec<Obj>,
    stack: Vec<usize>,
    marks: Vec<usize>,
    memo: std::collections::HashMap<u32, usize>,
}

const MAX_DEPTH: usize = 200;

/// Parse a whole pickle (up to its STOP opcode).
pub fn load(data: &[u8]) -> Result<Value, PickleError> {
    let mut vm = Vm { data, pos: 0, arena: Vec::new(), stack: Vec::new(), marks: Vec::new(), memo: Default::default() };
    let top = vm.run()?;
    vm.resolve(top, 0)
}

impl<'a> Vm<'a> {
    fn err<T>(&self, reason: impl Into<String>) -> Result<T, PickleError> {
        Err(PickleError { offset: self.pos, reason: reason.into() })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        if self.pos + n > self.data.len() {
            return self.err("truncated (the file ends inside an opcode)");
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, PickleError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, PickleError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, PickleError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn line(&mut self) -> Result<String, PickleError> {
        let start = self.pos;
        while self.pos < self.data.len() && self.data[self.pos] != b'\n' {
            self.pos += 1;
        }
        if self.pos >= self.data.len() {
            return self.err("truncated line");
        }
        let s = String::from_utf8_lossy(&self.data[start..self.pos]).into_owned();
        self.pos += 1;
        Ok(s)
    }
    fn utf8(&self, b: &[u8]) -> Result<String, PickleError> {
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => self.err(format!("string is not valid UTF-8: {e}")),
        }
    }
    fn new_obj(&mut self, o: Obj) -> usize {
        self.arena.push(o);
        self.arena.len() - 1
    }
    fn push(&mut self, o: Obj) {
        let id = self.new_obj(o);
        self.stack.push(id);
    }
    fn pop(&mut self) -> Result<usize, PickleError> {
        match self.stack.pop() {
            Some(v) => Ok(v),
            None => self.err("stack underflow"),
        }
    }
    fn pop_mark(&mut self) -> Result<Vec<usize>, PickleError> {
        let Some(m) = self.marks.pop() else { return self.err("no MARK on the stack") };
        if m > self.stack.len() {
            return self.err("MARK beyond the stack");
        }
        Ok(self.stack.split_off(m))
    }
    fn top(&self) -> Result<usize, PickleError> {
        match self.stack.last() {
            Some(&v) => Ok(v),
            None => self.err("empty stack"),
        }
    }
    fn memo_put(&mut self, key: u32) -> Result<(), PickleError> {
        let t = self.top()?;
        self.memo.insert(key, t);
        Ok(())
    }
    fn memo_get(&mut self, key: u32) -> Result<(), PickleError> {
        match self.memo.get(&key) {
            Some(&v) => {
                self.stack.push(v);
                Ok(())
            }
            None => self.err(format!("memo key {key} was never stored")),
        }
    }
    fn val(&self, id: usize) -> Option<&Value> {
        match &self.arena[id] {
            Obj::Val(v) => Some(v),
            _ => None,
        }
    }
    fn str_of(&self, id: usize) -> Result<String, PickleError> {
        match self.val(id) {
            Some(Value::Str(s)) => Ok(s.clone()),
            _ => self.err("expected a string"),
        }
    }
    fn int_of(&self, id: usize) -> Result<i64, PickleError> {
        match self.val(id) {
            Some(Value::Int(i)) => Ok(*i),
            _ => self.err("expected an int"),
        }
    }
    fn items_of(&self, id: usize) -> Result<Vec<usize>, PickleError> {
        match &self.arena[id] {
            Obj::Tuple(v) | Obj::List(v) => Ok(v.clone()),
            _ => self.err("expected a tuple"),
        }
    }

    fn global(&mut self, module: String, name: String) -> Result<(), PickleError> {
        const ALLOWED: [(&str, &str); 10] = [
            ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar"),
            ("numpy", "dtype"),
            ("torch._utils", "_rebuild_tensor_v2"),
            ("collections", "OrderedDict"),
            ("_codecs", "encode"),
            ("torch", "LongStorage"),
            ("torch", "IntStorage"),
            ("torch", "FloatStorage"),
            ("torch", "DoubleStorage"),
        ];
        if !ALLOWED.iter().any(|(m, n)| *m == module && *n == name) {
            return self.err(format!(
                "global `{module}.{name}` is not allowed (only numpy scalars/dtypes, torch tensor rebuilding and OrderedDict are)"
            ));
        }
        self.push(Obj::Global(module, name));
        Ok(())
    }

    fn reduce(&mut self, func: usize, args: usize) -> Result<(), PickleError> {
        let Obj::Global(module, name) = self.arena[func].clone() else { return self.err("REDUCE on a non-callable") };
        let args = self.items_of(args)?;
        let obj = match (module.as_str(), name.as_str()) {
            ("numpy", "dtype") => {
                let Some(&a0) = args.first() else { return self.err("numpy.dtype() without arguments") };
                Obj::Dtype(self.str_of(a0)?)
            }
            (_, "scalar") => {
                let (Some(&d), Some(&b)) = (args.first(), args.get(1)) else { return self.err("numpy scalar needs (dtype, bytes)") };
                let Obj::Dtype(dt) = self.arena[d].clone() else { return self.err("numpy scalar without a dtype") };
                let bytes = match self.val(b) {
                    Some(Value::Bytes(x)) => x.clone(),
                    Some(Value::Str(s)) => self.latin1(s)?,
                    _ => return self.err("numpy scalar without its bytes"),
                };
                Obj::Val(Value::Numpy(Box::new(self.numpy_scalar(&dt, &bytes)?)))
            }
            ("collections", "OrderedDict") => Obj::Dict(Vec::new()),
            ("_codecs", "encode") => {
                // Protocol 2 writes bytes as _codecs.encode(str, 'latin1').
                // Python refuses any other encoding here, and any character above U+00FF.
                let Some(&a0) = args.first() else { return self.err("_codecs.encode without arguments") };
                let s = self.str_of(a0)?;
                let encoding = match args.get(1) {
                    Some(&a1) => self.str_of(a1)?,
                    None => return self.err("_codecs.encode without an encoding (protocol 2 names latin1)"),
                };
                if !LATIN1_NAMES.contains(&encoding.to_ascii_lowercase().replace('_', "-").as_str()) {
                    return self.err(format!("_codecs.encode with encoding `{}`; only latin1 is read", crate::raw::quote(&encoding)));
                }
                Obj::Val(Value::Bytes(self.latin1(&s)?))
            }
            ("torch._utils", "_rebuild_tensor_v2") => {
                if args.len() < 4 {
                    return self.err("_rebuild_tensor_v2 needs (storage, offset, size, stride, ...)");
                }
                let Obj::Storage { dtype, key, numel } = self.arena[args[0]].clone() else {
                    return self.err("_rebuild_tensor_v2 without a storage");
                };
                let offset = self.int_of(args[1])?;
                let size = self.items_of(args[2])?.into_iter().map(|i| self.int_of(i)).collect::<Result<Vec<_>, _>>()?;
                let stride = self.items_of(args[3])?.into_iter().map(|i| self.int_of(i)).collect::<Result<Vec<_>, _>>()?;
                if offset < 0 || size.iter().chain(&stride).any(|&x| x < 0) || size.len() != stride.len() {
                    return self.err("tensor with a negative offset, size or stride, or rank mismatch");
                }
                Obj::Val(Value::Tensor(TensorRef {
                    dtype,
                    key,
                    numel,
                    offset: offset as u64,
                    size: size.into_iter().map(|x| x as u64).collect(),
                    stride: stride.into_iter().map(|x| x as u64).collect(),
                }))
            }
            _ => return self.err(format!("`{module}.{name}` cannot be called")),
        };
        self.push(obj);
        Ok(())
    }

    /// `s.encode('latin1')` as Python does it: every character is one byte, and a character above
    /// U+00FF is an error (Python's UnicodeEncodeError), never truncated.
    fn latin1(&self, s: &str) -> Result<Vec<u8>, PickleError> {
        s.chars()
            .enumerate()
            .map(|(i, c)| {
                u8::try_from(u32::from(c))
                    .or_else(|_| self.err(format!("character {i} (U+{:04X}) cannot be encoded as latin1", u32::from(c))))
            })
            .collect()
    }

    fn numpy_scalar(&self, dtype: &str, b: &[u8]) -> Result<Value, PickleError> {
        let kind = dtype.trim_start_matches(['<', '=', '|']);
        if dtype.starts_with('>') {
            return self.err(format!("big-endian numpy dtype `{dtype}`"));
        }
        Ok(match kind {
            "f8" if b.len() == 8 => Value::Float(f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])),
            "f4" if b.len() == 4 => Value::Float(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            "i8" if b.len() == 8 => Value::Int(i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])),
            "i4" if b.len() == 4 => Value::Int(i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            "b1" if b.len() == 1 => Value::Bool(b[0] != 0),
            k if k.starts_with('U') && b.len().is_multiple_of(4) => {
                // UCS-4 little endian; numpy drops trailing NULs.
                let mut s = String::new();
                for c in b.chunks_exact(4) {
                    let cp = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    match char::from_u32(cp) {
                        Some(ch) => s.push(ch),
                        None => return self.err(format!("invalid code point {cp:#x} in a numpy string")),
                    }
                }
                Value::Str(s.trim_end_matches('\0').to_string())
            }
            _ => return self.err(format!("unsupported numpy scalar dtype `{dtype}` ({} bytes)", b.len())),
        })
    }

    fn run(&mut self) -> Result<usize, PickleError> {
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    let p = self.u8()?;
                    if p > 5 {
                        return self.err(format!("unsupported pickle protocol {p}"));
                    }
                }
                0x95 => {
                    self.u64()?;
                }
                b'.' => return self.pop(),
                b'(' => self.marks.push(self.stack.len()),
                b'}' => self.push(Obj::Dict(Vec::new())),
                b']' => self.push(Obj::List(Vec::new())),
                b')' => self.push(Obj::Tuple(Vec::new())),
                0x8f => self.push(Obj::Set(Vec::new())),
                b'N' => self.push(Obj::Val(Value::None)),
                0x88 => self.push(Obj::Val(Value::Bool(true))),
                0x89 => self.push(Obj::Val(Value::Bool(false))),
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Obj::Val(Value::Int(i64::from(v))))
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Obj::Val(Value::Int(i64::from(v))))
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(Obj::Val(Value::Int(i64::from(v))))
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a { self.u8()? as usize } else { self.u32()? as usize };
                    if n > 8 {
                        return self.err("integer wider than 64 bits");
                    }
                    let b = self.take(n)?;
                    let mut v: i64 = 0;
                    for (i, &x) in b.iter().enumerate() {
                        v |= i64::from(x) << (8 * i);
                    }
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        v -= 1i64 << (8 * n);
                    }
                    self.push(Obj::Val(Value::Int(v)))
                }
                b'G' => {
                    let b = self.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.push(Obj::Val(Value::Float(f64::from_be_bytes(a))))
                }
                0x8c | b'X' | 0x8d => {
                    let n = match op {
                        0x8c => self.u8()? as usize,
                        b'X' => self.u32()? as usize,
                        _ => self.u64()? as usize,
                    };
                    let b = self.take(n)?;
                    let s = self.utf8(b)?;
                    self.push(Obj::Val(Value::Str(s)))
                }
                b'U' | b'T' => {
                    let n = if op == b'U' { self.u8()? as usize } else { self.u32()? as usize };
                    let b = self.take(n)?;
                    let s: String = b.iter().map(|&c| c as char).collect();
                    self.push(Obj::Val(Value::Str(s)))
                }
                b'C' | b'B' | 0x8e => {
                    let n = match op {
                        b'C' => self.u8()? as usize,
                        b'B' => self.u32()? as usize,
                        _ => self.u64()? as usize,
                    };
                    let b = self.take(n)?.to_vec();
                    self.push(Obj::Val(Value::Bytes(b)))
                }
                // Memo store (MEMOIZE, BINPUT, LONG_BINPUT) and fetch (BINGET, LONG_BINGET).
                0x94 | b'q' | b'r' | b'h' | b'j' => {
                    let key = match op {
                        0x94 => self.memo.len() as u32,
                        b'q' | b'h' => u32::from(self.u8()?),
                        _ => self.u32()?,
                    };
                    if matches!(op, b'h' | b'j') { self.memo_get(key)? } else { self.memo_put(key)? }
                }
                b'0' => {
                    self.pop()?;
                }
                b'2' => {
                    let t = self.top()?;
                    self.stack.push(t)
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Obj::Tuple(items))
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n {
                        return self.err("stack underflow");
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.push(Obj::Tuple(items))
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Obj::List(items))
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return self.err("DICT with an odd number of items");
                    }
                    let pairs = items.chunks_exact(2).map(|p| (p[0], p[1])).collect();
                    self.push(Obj::Dict(pairs))
                }
                b'a' | b'e' => {
                    // APPEND (one item) and APPENDS (the items above the mark) onto the list below.
                    let items = if op == b'a' { vec![self.pop()?] } else { self.pop_mark()? };
                    let l = self.top()?;
                    match &mut self.arena[l] {
                        Obj::List(x) => x.extend(items),
                        _ => return self.err(if op == b'a' { "APPEND to a non-list" } else { "APPENDS to a non-list" }),
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let d = self.top()?;
                    match &mut self.arena[d] {
                        Obj::Dict(x) => x.push((k, v)),
                        _ => return self.err("SETITEM on a non-dict"),
                    }
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return self.err("SETITEMS with an odd number of items");
                    }
                    let d = self.top()?;
                    match &mut self.arena[d] {
                        Obj::Dict(x) => x.extend(items.chunks_exact(2).map(|p| (p[0], p[1]))),
                        _ => return self.err("SETITEMS on a non-dict"),
                    }
                }
                0x90 => {
                    let items = self.pop_mark()?;
                    let s = self.top()?;
                    match &mut self.arena[s] {
                        Obj::Set(x) => x.extend(items),
                        _ => return self.err("ADDITEMS on a non-set"),
                    }
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Obj::Set(items))
                }
                b'c' => {
                    let m = self.line()?;
                    let n = self.line()?;
                    self.global(m, n)?
                }
                0x93 => {
                    let n = self.pop()?;
                    let m = self.pop()?;
                    let (m, n) = (self.str_of(m)?, self.str_of(n)?);
                    self.global(m, n)?
                }
                // REDUCE (callable, args) and NEWOBJ (class, args): the same for the allowed globals.
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let f = self.pop()?;
                    self.reduce(f, args)?
                }
                b'b' => {
                    // BUILD: only dtype state (byte order etc.) is expected; it changes nothing we keep.
                    let _state = self.pop()?;
                    let t = self.top()?;
                    match &self.arena[t] {
                        Obj::Dtype(_) | Obj::Dict(_) => {}
                        _ => return self.err("BUILD on an object that is not a numpy dtype"),
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let items = self.items_of(pid)?;
                    // ('storage', torch.LongStorage, key, location, numel)
                    if items.len() != 5 || self.val(items[0]) != Some(&Value::Str("storage".into())) {
                        return self.err("persistent id is not a torch storage");
                    }
                    let Obj::Global(_, ty) = self.arena[items[1]].clone() else { return self.err("storage without a type") };
                    let key = match self.val(items[2]) {
                        Some(Value::Str(s)) => s.clone(),
                        Some(Value::Int(i)) => i.to_string(),
                        _ => return self.err("storage key is not a string"),
                    };
                    let numel = self.int_of(items[4])?;
                    let dtype = match ty.as_str() {
                        "LongStorage" => "int64",
                        "IntStorage" => "int32",
                        "FloatStorage" => "float32",
                        "DoubleStorage" => "float64",
                        _ => return self.err(format!("unsupported storage type {ty}")),
                    };
                    self.push(Obj::Storage { dtype: dtype.into(), key, numel: numel.max(0) as u64 })
                }
                other => return self.err(format!("unsupported opcode {other:#04x}")),
            }
        }
    }

    fn resolve(&self, id: usize, depth: usize) -> Result<Value, PickleError> {
        if depth > MAX_DEPTH {
            return self.err("nesting too deep (or a reference cycle)");
        }
        let r = |ids: &Vec<usize>| ids.iter().map(|&i| self.resolve(i, depth + 1)).collect::<Result<Vec<_>, _>>();
        Ok(match &self.arena[id] {
            Obj::Val(v) => v.clone(),
            Obj::List(v) => Value::List(r(v)?),
            Obj::Tuple(v) => Value::Tuple(r(v)?),
            Obj::Set(v) => Value::Set(r(v)?),
            Obj::Dict(p) => {
                // Python dict semantics: a repeated key keeps its first position, the last value.
                let mut out: Vec<(Value, Value)> = Vec::with_capacity(p.len());
                let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
                for &(k, v) in p {
                    let (k, v) = (self.resolve(k, depth + 1)?, self.resolve(v, depth + 1)?);
                    match seen.entry(format!("{k:?}")) {
                        std::collections::hash_map::Entry::Occupied(e) => out[*e.get()].1 = v,
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(out.len());
                            out.push((k, v));
                        }
                    }
                }
                Value::Dict(out)
            }
            Obj::Global(m, n) => return self.err(format!("a bare reference to `{m}.{n}` is not data")),
            Obj::Dtype(d) => Value::Str(d.clone()),
            Obj::Storage { .. } => return self.err("a bare storage is not data"),
        })
    }
}

impl Value {
    /// Look a string key up in a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(p) => p.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            Value::Numpy(v) => v.as_str(),
            _ => None,
        }
    }
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Numpy(v) => v.as_int(),
            _ => None,
        }
    }
    /// numpy scalars unwrapped.
    pub fn plain(&self) -> &Value {
        match self {
            Value::Numpy(v) => v,
            v => v,
        }
    }
}

#[cfg(test)]
mod tests;
