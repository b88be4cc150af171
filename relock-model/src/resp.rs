//! RESP2 on a byte stream: reading a command or a reply, as the conformance mirror needs.

use std::io::{self, BufRead};

use crate::server::Reply;

/// Reads one RESP2 value (a reply, or a command as an array of bulk strings). An inline
/// command (`PING\r\n`) reads as an array of its words. `Ok(None)` at a clean end of stream.
pub fn read(reader: &mut impl BufRead) -> io::Result<Option<Reply>> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line)? == 0 {
        return Ok(None);
    }
    if !line.ends_with(b"\r\n") {
        return Err(bad("a line without CRLF"));
    }
    line.truncate(line.len() - 2);
    let Some((&kind, rest)) = line.split_first() else {
        return Ok(Some(Reply::Array(vec![])));
    };
    let text = || String::from_utf8_lossy(rest).into_owned();
    let number = || -> io::Result<i64> { text().parse().map_err(|_| bad("a bad length")) };
    Ok(Some(match kind {
        b'+' => Reply::Status(text()),
        b'-' => Reply::Error(text()),
        b':' => Reply::Int(number()?),
        b'$' => match number()? {
            -1 => Reply::Nil,
            n if n < 0 => return Err(bad("a negative length")),
            n => {
                let mut body = vec![0; n as usize + 2];
                reader.read_exact(&mut body)?;
                body.truncate(n as usize);
                Reply::Bulk(body)
            }
        },
        b'*' => match number()? {
            -1 => Reply::NilArray,
            n if n < 0 => return Err(bad("a negative length")),
            n => {
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(read(reader)?.ok_or_else(|| bad("an array cut short"))?);
                }
                Reply::Array(items)
            }
        },
        _ => Reply::Array(
            line.split(|b| b.is_ascii_whitespace())
                .filter(|w| !w.is_empty())
                .map(|w| Reply::Bulk(w.to_vec()))
                .collect(),
        ),
    }))
}

/// A command's arguments, from the array a client sent.
pub fn command_args(value: Reply) -> Option<Vec<Vec<u8>>> {
    match value {
        Reply::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Reply::Bulk(b) => Some(b),
                Reply::Int(n) => Some(n.to_string().into_bytes()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// A command as RESP2 bytes.
pub fn encode_command(args: &[Vec<u8>]) -> Vec<u8> {
    Reply::Array(args.iter().cloned().map(Reply::Bulk).collect()).to_resp()
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("RESP: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        let value = Reply::Array(vec![
            Reply::Int(-3),
            Reply::Nil,
            Reply::Bulk(b"a\r\nb".to_vec()),
            Reply::Status("OK".into()),
            Reply::Error("ERR x".into()),
            Reply::NilArray,
            Reply::Array(vec![]),
        ]);
        let bytes = value.to_resp();
        let mut reader = io::BufReader::new(&bytes[..]);
        assert_eq!(read(&mut reader).unwrap(), Some(value));
        assert_eq!(read(&mut reader).unwrap(), None);
    }

    #[test]
    fn inline_commands_read_as_words() {
        let mut reader = io::BufReader::new(&b"PING  hi\r\n"[..]);
        let args = command_args(read(&mut reader).unwrap().unwrap()).unwrap();
        assert_eq!(args, vec![b"PING".to_vec(), b"hi".to_vec()]);
    }
}
