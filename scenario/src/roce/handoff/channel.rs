//! The channels a message travels on: a file followed like `tail -f`, a
//! FIFO, or stdin/stdout.

use super::*;

/// Where a side reads or writes its hand-off: a file, or `-` (stdin/stdout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Channel {
    /// `-`: stdout for the writer, stdin for the reader.
    Stdio,
    /// A path: a regular file, or a FIFO if one exists there when the
    /// channel is opened.
    File(PathBuf),
}

impl Channel {
    /// `-` is [`Channel::Stdio`], anything else a path; this never fails
    /// (opening the path may).
    pub fn parse(arg: &str) -> Channel {
        if arg == "-" { Channel::Stdio } else { Channel::File(PathBuf::from(arg)) }
    }
    fn name(&self, stdio: &str) -> String {
        match self {
            Channel::Stdio => stdio.to_string(),
            Channel::File(p) => p.display().to_string(),
        }
    }
}

/// The writing end: one line per message, flushed at once.
pub struct HandoffOut {
    name: String,
    sink: Box<dyn Write + Send>,
}

impl fmt::Debug for HandoffOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandoffOut").field("name", &self.name).finish_non_exhaustive()
    }
}

impl HandoffOut {
    /// Opens `ch` for writing; a file is created or truncated now.
    pub fn open(ch: &Channel) -> Result<HandoffOut, HandoffError> {
        let name = ch.name("stdout");
        let sink: Box<dyn Write + Send> = match ch {
            Channel::Stdio => Box::new(io::stdout()),
            Channel::File(p) if is_fifo(p) => {
                // Opened once (this waits for the reader, as the shell's
                // `>fifo` does): the reader takes the last writer's close
                // for the end.
                let io = |source| HandoffError::Io { path: name.clone(), source };
                Box::new(std::fs::OpenOptions::new().write(true).open(p).map_err(io)?)
            }
            Channel::File(p) => {
                // Truncate what an earlier run left, then only ever append.
                let io = |source| HandoffError::Io { path: name.clone(), source };
                File::create(p).map_err(io)?;
                Box::new(std::fs::OpenOptions::new().append(true).open(p).map_err(io)?)
            }
        };
        Ok(HandoffOut { name, sink })
    }

    /// Any writer (tests, in-process hand-offs).
    pub fn new(name: impl Into<String>, sink: Box<dyn Write + Send>) -> HandoffOut {
        HandoffOut { name: name.into(), sink }
    }

    /// Writes `m` as one line and flushes it; a failed write or flush is
    /// [`HandoffError::Io`] (e.g. a broken pipe once the reader is gone).
    pub fn send(&mut self, m: &Message) -> Result<(), HandoffError> {
        let line = format!("{m}\n");
        self.sink
            .write_all(line.as_bytes())
            .and_then(|()| self.sink.flush())
            .map_err(|source| HandoffError::Io { path: self.name.clone(), source })
    }
}

enum Event {
    Line(String),
    Eof,
    Err(io::Error),
}

/// The reading end. A FIFO, stdin or any reader is read by a thread that
/// blocks on it and hands complete lines over, so the caller can wait with
/// a timeout or poll without blocking. A file is read in the caller, only
/// when it asks ([`expect`](HandoffIn::expect) looks again every 10 ms until
/// its timeout, [`poll`](HandoffIn::poll) once): nothing wakes up while the
/// caller streams, which a busy-polling receiver pinned to one CPU would pay
/// for in preemptions. The line numbers in its errors count the messages
/// read so far; blank lines and `#` comments are skipped and not counted.
pub struct HandoffIn {
    name: String,
    feed: Feed,
    line: usize,
    closed: bool,
}

enum Feed {
    Thread(mpsc::Receiver<Event>),
    File(Tail),
}

/// How often `expect` looks at a followed file again.
const FOLLOW_POLL: Duration = Duration::from_millis(10);

impl fmt::Debug for HandoffIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandoffIn").field("name", &self.name).field("line", &self.line).finish_non_exhaustive()
    }
}

impl HandoffIn {
    /// Starts following `ch`: a file that does not exist yet is waited for,
    /// a FIFO is opened once (waiting for a writer) and read to its end.
    /// Never fails here; an error opening or reading the channel comes back
    /// from the next [`expect`](HandoffIn::expect) or
    /// [`poll`](HandoffIn::poll) as [`HandoffError::Io`].
    pub fn open(ch: &Channel) -> HandoffIn {
        let name = ch.name("stdin");
        let feed = match ch.clone() {
            Channel::Stdio => Feed::Thread(reader_thread(io::stdin())),
            Channel::File(p) if is_fifo(&p) => Feed::Thread(fifo_thread(p)),
            Channel::File(p) => Feed::File(Tail { path: p, file: None, pending: Vec::new() }),
        };
        HandoffIn { name, feed, line: 0, closed: false }
    }

    /// Any reader, read to its end (tests, in-process hand-offs).
    pub fn from_reader(name: impl Into<String>, r: impl Read + Send + 'static) -> HandoffIn {
        HandoffIn { name: name.into(), feed: Feed::Thread(reader_thread(r)), line: 0, closed: false }
    }

    fn take(&mut self, ev: Event, expected: &'static str) -> Result<Message, HandoffError> {
        match ev {
            Event::Line(text) => {
                self.line += 1;
                Message::parse(&text, self.line)
            }
            Event::Eof => {
                self.closed = true;
                Err(HandoffError::Closed { from: self.name.clone(), expected })
            }
            Event::Err(source) => {
                // (As the reading thread ends on an error: nothing follows.)
                self.closed = true;
                Err(HandoffError::Io { path: self.name.clone(), source })
            }
        }
    }

    /// The next event if there is one now; `Eof` once a thread's channel
    /// is gone. A file that turned out to be a FIFO gets its thread here.
    fn next_now(&mut self) -> Option<Event> {
        if let Feed::File(t) = &mut self.feed {
            match t.next() {
                TailNext::Event(ev) => return Some(ev),
                TailNext::Nothing => return None,
                TailNext::Fifo => self.feed = Feed::Thread(fifo_thread(t.path.clone())),
            }
        }
        match &self.feed {
            Feed::Thread(rx) => match rx.try_recv() {
                Ok(ev) => Some(ev),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => Some(Event::Eof),
            },
            Feed::File(_) => None,
        }
    }

    /// The next event within `timeout`, `None` when it passed.
    #[allow(clippy::disallowed_methods)] // a hand-off between processes waits on the real clock
    fn next_within(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = Instant::now() + timeout;
        // A file is looked at every FOLLOW_POLL; a thread's channel is
        // waited on. A path that turns out to be a FIFO gets its thread,
        // and the rest of the wait is on that.
        loop {
            let tail = match &mut self.feed {
                Feed::Thread(rx) => {
                    return match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                        Ok(ev) => Some(ev),
                        Err(mpsc::RecvTimeoutError::Timeout) => None,
                        Err(mpsc::RecvTimeoutError::Disconnected) => Some(Event::Eof),
                    };
                }
                Feed::File(tail) => tail,
            };
            match tail.next() {
                TailNext::Event(ev) => return Some(ev),
                TailNext::Fifo => self.feed = Feed::Thread(fifo_thread(tail.path.clone())),
                TailNext::Nothing => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    std::thread::sleep(left.min(FOLLOW_POLL));
                }
            }
        }
    }

    /// The next message, which must be of kind `expected`; waits up to `timeout`.
    pub fn expect(&mut self, expected: &'static str, timeout: Duration) -> Result<Message, HandoffError> {
        if self.closed {
            return Err(HandoffError::Closed { from: self.name.clone(), expected });
        }
        let ev = self.next_within(timeout).ok_or_else(|| HandoffError::Timeout {
            from: self.name.clone(),
            expected,
            secs: timeout.as_secs(),
        })?;
        let m = self.take(ev, expected)?;
        if m.kind() != expected {
            return Err(HandoffError::Unexpected { line: self.line, expected, got: m.kind() });
        }
        Ok(m)
    }

    /// A message if one is there now (`None` also once the channel closed).
    pub fn poll(&mut self, expected: &'static str) -> Result<Option<Message>, HandoffError> {
        if self.closed {
            return Ok(None);
        }
        match self.next_now() {
            None => Ok(None),
            Some(Event::Eof) => {
                self.closed = true;
                Ok(None)
            }
            Some(ev) => {
                let m = self.take(ev, expected)?;
                if m.kind() != expected {
                    return Err(HandoffError::Unexpected { line: self.line, expected, got: m.kind() });
                }
                Ok(Some(m))
            }
        }
    }
}

/// A thread reading `r` to its end, its lines on the returned channel.
fn reader_thread(r: impl Read + Send + 'static) -> mpsc::Receiver<Event> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || forward(BufReader::new(r), &tx));
    rx
}

/// A thread opening the FIFO at `path` (which waits for a writer) and
/// reading it to its end; the thread ends with the process if no writer
/// ever comes.
fn fifo_thread(path: PathBuf) -> mpsc::Receiver<Event> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || match File::open(&path) {
        Ok(f) => forward(BufReader::new(f), &tx),
        Err(e) => {
            let _ = tx.send(Event::Err(e));
        }
    });
    rx
}

/// A file followed like `tail -F`, read only when the reader asks: it may
/// not exist yet, and its last line may not be complete yet.
struct Tail {
    path: PathBuf,
    file: Option<File>,
    pending: Vec<u8>,
}

enum TailNext {
    Event(Event),
    Nothing,
    /// The path is a FIFO: it needs a thread (opening it blocks).
    Fifo,
}

impl Tail {
    fn next(&mut self) -> TailNext {
        let mut buf = [0u8; 4096];
        loop {
            while let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=i).collect();
                let text = String::from_utf8_lossy(&line).trim_end_matches(['\n', '\r']).to_string();
                if !skipped(&text) {
                    return TailNext::Event(Event::Line(text));
                }
            }
            let file = match &mut self.file {
                Some(f) => f,
                None => match std::fs::metadata(&self.path) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return TailNext::Nothing,
                    Err(e) => return TailNext::Event(Event::Err(e)),
                    Ok(m) if m.file_type().is_fifo() => return TailNext::Fifo,
                    Ok(_) => match File::open(&self.path) {
                        Ok(f) => self.file.insert(f),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => return TailNext::Nothing,
                        Err(e) => return TailNext::Event(Event::Err(e)),
                    },
                },
            };
            match file.read(&mut buf) {
                Ok(0) => return TailNext::Nothing,
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return TailNext::Event(Event::Err(e)),
            }
        }
    }
}

/// Blank lines and `#` comments carry no message.
fn skipped(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

fn forward(mut r: impl BufRead, tx: &mpsc::Sender<Event>) {
    let mut line = String::new();
    loop {
        line.clear();
        let ev = match r.read_line(&mut line) {
            Ok(0) => Event::Eof,
            Ok(_) if skipped(&line) => continue,
            Ok(_) => Event::Line(line.trim_end_matches(['\n', '\r']).to_string()),
            Err(e) => Event::Err(e),
        };
        let last = !matches!(ev, Event::Line(_));
        if tx.send(ev).is_err() || last {
            return;
        }
    }
}

fn is_fifo(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}
