//! A reader of JSON documents (RFC 8259), for the rank-table files that
//! `HcclCommInitClusterInfo` reads.
//!
//! Hand-written rather than a dependency: the emulator's dependencies stay lean (a rank table
//! is a few kilobytes of objects, arrays and strings, read once per communicator), and the
//! reader must keep what CANN's parser (nlohmann::json) distinguishes: a value's kind (a
//! number where a string is expected is an error of its own) and, for duplicate keys, the last
//! one. Numbers are kept as their text, checked against the grammar: the rank table's numbers
//! are strings anyway.

/// A JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// A number, as written (its grammar checked).
    Number(String),
    String(String),
    Array(Vec<Json>),
    /// Members in document order, duplicates kept ([`Json::get`] finds the last).
    Object(Vec<(String, Json)>),
}

/// Where and why a document is not JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    /// 1-based line and column (in bytes) of the first byte that does not fit.
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) what: &'static str,
}

impl std::fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.what
        )
    }
}

/// How deeply arrays and objects may nest: enough for any rank table, and a bound on the
/// reader's recursion for hostile input.
const MAX_DEPTH: usize = 64;

impl Json {
    /// Reads `text`, one value with optional whitespace around it.
    pub(crate) fn parse(text: &str) -> Result<Json, SyntaxError> {
        let mut reader = Reader {
            bytes: text.as_bytes(),
            at: 0,
        };
        let value = reader.value(0)?;
        reader.skip_space();
        if reader.at != reader.bytes.len() {
            return Err(reader.error("text after the document's value"));
        }
        Ok(value)
    }

    /// The member `key` of an object (the last, if the key repeats, as nlohmann::json keeps
    /// it); `None` for a missing key or a value that is not an object.
    pub(crate) fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// What kind of value this is, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn error(&self, what: &'static str) -> SyntaxError {
        let before = &self.bytes[..self.at.min(self.bytes.len())];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        SyntaxError {
            line,
            column: self.at - line_start + 1,
            what,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn expect(&mut self, word: &[u8], what: &'static str) -> Result<(), SyntaxError> {
        if self.bytes[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, SyntaxError> {
        self.skip_space();
        match self.peek() {
            None => Err(self.error("the document ends where a value was expected")),
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self
                .expect(b"true", "not a value")
                .map(|_| Json::Bool(true)),
            Some(b'f') => self
                .expect(b"false", "not a value")
                .map(|_| Json::Bool(false)),
            Some(b'n') => self.expect(b"null", "not a value").map(|_| Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.error("not a value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, SyntaxError> {
        if depth > MAX_DEPTH {
            return Err(self.error("arrays and objects nest too deeply"));
        }
        self.at += 1;
        let mut members = Vec::new();
        self.skip_space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Json::Object(members));
        }
        loop {
            self.skip_space();
            if self.peek() != Some(b'"') {
                return Err(self.error("an object's key must be a string"));
            }
            let key = self.string()?;
            self.skip_space();
            self.expect(b":", "a ':' must follow an object's key")?;
            let value = self.value(depth)?;
            members.push((key, value));
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.error("a ',' or '}' must follow an object's member")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, SyntaxError> {
        if depth > MAX_DEPTH {
            return Err(self.error("arrays and objects nest too deeply"));
        }
        self.at += 1;
        let mut items = Vec::new();
        self.skip_space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error("a ',' or ']' must follow an array's item")),
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<Json, SyntaxError> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("a number needs digits")),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(self.error("a number's fraction needs digits"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("a number's exponent needs digits"));
            }
        }
        // Only ASCII was consumed, so the slice is valid UTF-8.
        let text = String::from_utf8_lossy(&self.bytes[start..self.at]).into_owned();
        Ok(Json::Number(text))
    }

    fn hex4(&mut self) -> Result<u32, SyntaxError> {
        let hex = self.bytes.get(self.at..self.at + 4);
        let value = hex
            .and_then(|h| std::str::from_utf8(h).ok())
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok());
        let Some(value) = value else {
            return Err(self.error("\\u needs four hexadecimal digits"));
        };
        self.at += 4;
        Ok(value)
    }

    fn string(&mut self) -> Result<String, SyntaxError> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(self.error("a string is not closed"));
            };
            self.at += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.error("a string is not closed"));
                    };
                    self.at += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => {
                            self.at -= 1;
                            return Err(self.error("not an escape JSON knows"));
                        }
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => {
                    self.at -= 1;
                    return Err(self.error("a control character inside a string"));
                }
                _ => out.push(b),
            }
        }
        // The input is a `&str` and escapes were encoded as UTF-8, so this cannot fail; an
        // error would still be reported, not a panic.
        String::from_utf8(out).map_err(|_| self.error("a string is not UTF-8"))
    }

    /// The character of a `\uXXXX` escape (after the `u`), a surrogate pair included.
    fn unicode_escape(&mut self) -> Result<char, SyntaxError> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.bytes[self.at..].starts_with(b"\\u") {
                    return Err(self.error("a high surrogate must be followed by a low one"));
                }
                self.at += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.error("a high surrogate must be followed by a low one"));
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.error("a low surrogate without a high one")),
            c => c,
        };
        char::from_u32(code).ok_or_else(|| self.error("not a Unicode scalar value"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Json {
        Json::String(v.to_owned())
    }

    #[test]
    fn reads_every_kind_of_value() {
        let doc = r#" { "a": [1, -2.5e+3, 0], "b": {"c": null, "d": true, "e": false},
                        "f": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "g": [] , "h": {} } "#;
        let v = Json::parse(doc).unwrap();
        assert_eq!(
            v.get("a"),
            Some(&Json::Array(vec![
                Json::Number("1".into()),
                Json::Number("-2.5e+3".into()),
                Json::Number("0".into())
            ]))
        );
        let b = v.get("b").unwrap();
        assert_eq!(b.get("c"), Some(&Json::Null));
        assert_eq!(b.get("d"), Some(&Json::Bool(true)));
        assert_eq!(b.get("e"), Some(&Json::Bool(false)));
        assert_eq!(v.get("f"), Some(&s("x\"\\/\u{8}\u{c}\n\r\té😀")));
        assert_eq!(v.get("g"), Some(&Json::Array(vec![])));
        assert_eq!(v.get("h"), Some(&Json::Object(vec![])));
        assert_eq!(v.get("missing"), None);
        assert_eq!(s("x").get("a"), None);
    }

    #[test]
    fn a_repeated_key_reads_as_its_last_value() {
        let v = Json::parse(r#"{"k": "1", "k": "2"}"#).unwrap();
        assert_eq!(v.get("k"), Some(&s("2")));
    }

    #[test]
    fn names_where_a_document_is_not_json() {
        let cases = [
            ("", 1, 1, "the document ends where a value was expected"),
            ("{\"a\": 1,}", 1, 9, "an object's key must be a string"),
            ("[1 2]", 1, 4, "a ',' or ']' must follow an array's item"),
            ("{\n  \"a\" 1}", 2, 7, "a ':' must follow an object's key"),
            ("\"abc", 1, 5, "a string is not closed"),
            ("\"a\tb\"", 1, 3, "a control character inside a string"),
            ("\"\\x\"", 1, 3, "not an escape JSON knows"),
            ("\"\\u12g4\"", 1, 4, "\\u needs four hexadecimal digits"),
            ("\"\\udc00\"", 1, 8, "a low surrogate without a high one"),
            (
                "\"\\ud800x\"",
                1,
                8,
                "a high surrogate must be followed by a low one",
            ),
            ("01", 1, 2, "text after the document's value"),
            ("-", 1, 2, "a number needs digits"),
            ("1.", 1, 3, "a number's fraction needs digits"),
            ("1e", 1, 3, "a number's exponent needs digits"),
            ("tru", 1, 1, "not a value"),
            ("{} {}", 1, 4, "text after the document's value"),
            ("'a'", 1, 1, "not a value"),
        ];
        for (doc, line, column, what) in cases {
            let e = Json::parse(doc).unwrap_err();
            assert_eq!((e.line, e.column, e.what), (line, column, what), "{doc:?}");
        }
    }

    #[test]
    fn refuses_nesting_deeper_than_its_bound_without_overflowing_the_stack() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(Json::parse(&ok).is_ok());
        let deep = "[".repeat(100_000);
        let e = Json::parse(&deep).unwrap_err();
        assert_eq!(e.what, "arrays and objects nest too deeply");
        assert_eq!(e.column, MAX_DEPTH + 1);
    }

    #[test]
    fn kinds_name_values_for_messages() {
        let v = Json::parse(r#"[null, true, 1, "a", [], {}]"#).unwrap();
        let Json::Array(items) = v else { panic!() };
        let kinds: Vec<_> = items.iter().map(Json::kind).collect();
        assert_eq!(
            kinds,
            [
                "null",
                "a boolean",
                "a number",
                "a string",
                "an array",
                "an object"
            ]
        );
    }
}
