//! The SSE parser (`claude_host_protocol::sse`): input = 4 control bytes (chunk sizes) + a
//! byte stream.
//!
//! Checks: the same bytes fed whole and in arbitrary chunks give the same events and leave the
//! same bytes pending; every event read back through `format_event` (when its fields fit on
//! one line) is the same event; `find_event_end` resumed from its own hint finds what a scan
//! from the start finds.

use crate::input;
use claude_host_protocol::sse::{
    Event, EventParser, event_data, event_name, find_event_end, format_event,
};

fn drain(p: &mut EventParser, out: &mut Vec<Event>) {
    while let Some(e) = p.next_event() {
        out.push(e);
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let (ctl, stream) = input::split(data, 4);
    let mut whole = EventParser::new();
    whole.push(stream);
    let mut expected = Vec::new();
    drain(&mut whole, &mut expected);

    let mut chunked = EventParser::new();
    let mut got = Vec::new();
    for c in input::chunks(stream, ctl) {
        chunked.push(c);
        drain(&mut chunked, &mut got);
    }
    assert_eq!(got, expected, "chunking changed the events");
    assert_eq!(
        chunked.pending(),
        whole.pending(),
        "chunking changed what is pending"
    );

    for e in &expected {
        let one_line = |s: &str| !s.contains(['\n', '\r']);
        if one_line(&e.name) && one_line(&e.data) {
            let mut p = EventParser::new();
            p.push(&format_event(&e.name, e.data.as_bytes()));
            assert_eq!(
                p.next_event().as_ref(),
                Some(e),
                "format_event does not read back"
            );
        }
    }

    // The raw scanning API the relay uses, resumed from each hint as bytes arrive.
    let mut buf = Vec::new();
    let mut scan = 0;
    for c in input::chunks(stream, ctl) {
        buf.extend_from_slice(c);
        loop {
            let fresh = find_event_end(&buf, 0);
            match find_event_end(&buf, scan) {
                Ok(end) => {
                    assert_eq!(fresh, Ok(end), "a resumed scan found another event end");
                    let raw: Vec<u8> = buf.drain(..end).collect();
                    // The accessors never read past the event.
                    let _ = event_name(&raw);
                    let _ = event_data(&raw);
                    scan = 0;
                }
                Err(resume) => {
                    assert!(fresh.is_err(), "a resumed scan missed an event end");
                    assert!(resume <= buf.len(), "resume hint past the buffer");
                    scan = resume;
                    break;
                }
            }
        }
    }
}
