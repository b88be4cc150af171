//! The real server's side of the mirror: a link to it (each client connection's, and the
//! mirror's own control link), and the state the connections share under one lock, kept in
//! step with the real server: its keyspace read, its restarts followed, its function libraries
//! copied after a `FUNCTION RESTORE`.

use std::io::{self, BufReader, Write};
use std::net::TcpStream;

use super::compare::{self, real_dump};
use super::simulator::Simulator;
use crate::resp::{self, encode_command};
use crate::server::{Reply, Server};

pub(super) struct State {
    pub(super) server: Server,
    /// The mirror's own connection to the real server: `TIME` and the keyspace reads.
    pub(super) control: Option<Link>,
    /// The real server's `run_id` when the control link was opened: another one is a restart.
    pub(super) run_id: Option<String>,
    pub(super) differences: usize,
}

/// A connection to the real server, for one command at a time.
pub(super) struct Link {
    pub(super) reader: BufReader<TcpStream>,
    pub(super) writer: TcpStream,
}

impl Link {
    pub(super) fn open(port: u16) -> io::Result<Link> {
        let writer = TcpStream::connect(("127.0.0.1", port))?;
        writer.set_nodelay(true)?;
        Ok(Link {
            reader: BufReader::new(writer.try_clone()?),
            writer,
        })
    }

    pub(super) fn call(&mut self, args: &[Vec<u8>]) -> io::Result<Reply> {
        self.writer.write_all(&encode_command(args))?;
        resp::read(&mut self.reader)?.ok_or_else(|| io::ErrorKind::UnexpectedEof.into())
    }
}

impl State {
    /// The real server's keyspace, read on the control link. A link the server closed (a
    /// `CLIENT KILL`, a restart) is opened again; if the server restarted meanwhile, the
    /// simulated one restarts too.
    pub(super) fn real_keyspace(&mut self, port: u16) -> io::Result<compare::Dump> {
        if let Some(link) = self.control.as_mut() {
            match real_dump(link) {
                Ok(dump) => return Ok(dump),
                Err(_) => self.control = None,
            }
        }
        let mut link = Link::open(port)?;
        let run_id = run_id(&mut link)?;
        if self.run_id.as_ref().is_some_and(|known| *known != run_id) {
            let appendonly =
                link.call(&[b"CONFIG".to_vec(), b"GET".to_vec(), b"appendonly".to_vec()])?;
            if appendonly == Reply::Array(vec![Reply::bulk("appendonly"), Reply::bulk("yes")]) {
                self.server.restart_keeping_data();
            } else {
                self.server.restart_empty();
            }
        }
        self.run_id = Some(run_id);
        let dump = real_dump(&mut link)?;
        self.control = Some(link);
        Ok(dump)
    }

    /// The control link, opened if there is none.
    fn control(&mut self, port: u16) -> io::Result<&mut Link> {
        if self.control.is_none() {
            let mut link = Link::open(port)?;
            self.run_id = Some(run_id(&mut link)?);
            self.control = Some(link);
        }
        Ok(self.control.as_mut().expect("just opened"))
    }

    /// Gives the simulated server the real one's function libraries, and nothing else.
    pub(super) fn copy_functions(&mut self, port: u16, simulator: &Simulator) -> io::Result<()> {
        let list = self.control(port)?.call(&[
            b"FUNCTION".to_vec(),
            b"LIST".to_vec(),
            b"WITHCODE".to_vec(),
        ])?;
        let codes: Vec<Vec<u8>> = match list {
            Reply::Array(libraries) => libraries
                .iter()
                .filter_map(|library| match library {
                    Reply::Array(fields) => fields
                        .chunks(2)
                        .find(|pair| pair[0] == Reply::bulk("library_code"))
                        .and_then(|pair| match &pair[1] {
                            Reply::Bulk(code) => Some(code.clone()),
                            _ => None,
                        }),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        simulator.with_server(self, move |server| {
            server.command(&["FUNCTION", "FLUSH"]);
            for code in codes {
                server.command(&[b"FUNCTION".to_vec(), b"LOAD".to_vec(), code]);
            }
        })
    }
}

/// The server's `run_id` (`INFO server`): another one after a reconnect is a restart.
fn run_id(link: &mut Link) -> io::Result<String> {
    let info = link.call(&[b"INFO".to_vec(), b"server".to_vec()])?;
    let Reply::Bulk(text) = info else {
        return Err(io::Error::other("INFO server: a bad reply"));
    };
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .unwrap_or_default()
        .trim()
        .to_string())
}
