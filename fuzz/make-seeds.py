#!/usr/bin/env python3
"""Writes fuzz/seeds/<target>/ from the captured CLI data in shared/reference/samples/ and the
AHP shapes VS Code sends (crates/ahp/tests/suite/vscode.rs). Run once; the seeds are committed."""
import json, os, sys

SAMPLES = sys.argv[1] if len(sys.argv) > 1 else "/work/shared/reference/samples"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")

def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)

def jl(path):
    with open(os.path.join(SAMPLES, path)) as f:
        return [json.loads(l) for l in f if l.strip()]

def dump(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)

# SSE streams: the Anthropic events that --include-partial-messages echoed (real upstream shapes).
inter = jl("control_session_interrupt_2.1.330.jsonl")
events = [m["msg"]["event"] for m in inter if m["dir"] == "<-" and m["msg"].get("type") == "stream_event"]
streams, cur = [], []
for e in events:
    cur.append(e)
    if e.get("type") == "message_stop":
        streams.append(cur); cur = []
if cur:
    streams.append(cur)
def sse(evs, crlf=False):
    nl = "\r\n" if crlf else "\n"
    return "".join(f"event: {e['type']}{nl}data: {dump(e)}{nl}{nl}" for e in evs)
for i, s in enumerate(streams):
    put("sse", f"stream{i}.sse", b"\x03\x07\x01\x10" + sse(s).encode())
    put("relay", f"stream{i}.sse", b"\x00\x05\x0b\x02\x20" + sse(s).encode())
put("sse", "crlf.sse", b"\x02\x01\x05\x00" + sse(streams[0][:3], crlf=True).encode() + b": comment\n\ndata: a\ndata: b\n\n")
head = sse(streams[0][:3]).encode()
put("relay", "cut.sse", b"\x01\x09\x09\x09\x09" + head)
put("relay", "error.sse", b"\x00\x10\x03\x08\x01" + head + b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n')
put("relay", "error-first.sse", b"\x00\x40\x40\x40\x40" + b'event: error\ndata: {"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}\n\n')
put("relay", "done.sse", b"\x00\x02\x02\x02\x02" + b"data: [DONE]\n\n" + sse(streams[0]).encode() + b"data: [DONE]\n\n")

# Proxy requests: the CLI's real Messages requests, as HTTP text.
for ver in ["2.1.330", "2.1.112"]:
    with open(os.path.join(SAMPLES, f"requests_tool_loop_{ver}.json")) as f:
        reqs = json.load(f)
    if isinstance(reqs, dict):
        reqs = reqs.get("requests", [])
    n = 0
    for r in reqs:
        if r.get("method") != "POST":
            continue
        keep = ("anthropic-beta", "anthropic-version", "user-agent", "content-type", "x-claude-code-session-id")
        hdrs = {k.lower(): v for k, v in r.get("headers", {}).items()}
        lines = [f"POST {r['path']}", "Host: 127.0.0.1:8080", "Authorization: Bearer $TOKEN.sess-1"]
        lines += [f"{k}: {hdrs[k]}" for k in keep if k in hdrs]
        lines.append(f"x-fuzz-reply: {n % 6}")
        body = r["body"]
        if n == 0:
            body = dict(body); body["model"] = "claude-sonnet-4-5"
        put("proxy_request", f"cli-{ver}-{n}.http", "\n".join(lines) + "\n\n" + dump(body))
        n += 1
small = {"model": "claude-opus-4-6", "max_tokens": 128000, "stream": True,
         "thinking": {"type": "enabled", "budget_tokens": 200000}, "output_config": {"effort": "max"},
         "messages": [{"role": "user", "content": [{"type": "text", "text": "hi __claude_host_user_prompt__"}]}]}
put("proxy_request", "fit-opus.http", "POST /v1/messages\nHost: localhost:8080\nAuthorization: Bearer $TOKEN.s\nanthropic-beta: context-management-2025-06-27,foo-2025\n\n" + dump(small))
small2 = {"model": "claude-sonnet-4-5", "max_tokens": 64000, "thinking": {"type": "adaptive"},
          "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}],
          "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
put("proxy_request", "fit-sonnet.http", "POST /v1/messages\nHost: 127.0.0.1:8080\nAuthorization: Bearer $TOKEN.s\nx-fuzz-reply: 1\n\n" + dump(small2))
put("proxy_request", "quota.http", "POST /v1/messages\nHost: 127.0.0.1:8080\nAuthorization: Bearer $TOKEN.s\nx-fuzz-reply: 3\n\n" + dump({"model": "claude-opus-4-6", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}))
put("proxy_request", "count.http", "POST /v1/messages/count_tokens\nHost: 127.0.0.1:8080\nAuthorization: Bearer $TOKEN.s\n\n" + dump({"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "count me"}], "system": "sys"}))
put("proxy_request", "models.http", "GET /v1/models\nHost: 127.0.0.1:8080\nAuthorization: Bearer $TOKEN.s\nx-fuzz-catalog: lenient\n\n")
put("proxy_request", "foreign.http", "POST /v1/messages\nHost: evil.example:8080\nAuthorization: Bearer $TOKEN.s\n\n{}")
put("proxy_request", "noauth.http", "POST /v1/messages\nHost: 127.0.0.1:8080\n\n{\"model\":\"x\",\"messages\":[]}")

# stream-json: -p stdout and the CLI's side of both control sessions.
with open(os.path.join(SAMPLES, "stdout_p_mode_tools_default_2.1.330.jsonl"), "rb") as f:
    put("stream_json", "p-mode.jsonl", b"\x3f\xff\x00" + f.read())
allow = jl("control_session_allow_2.1.330.jsonl")
def side(msgs, d):
    return "".join(dump(m["msg"]) + "\n" for m in msgs if m["dir"] == d)
put("stream_json", "control-allow.jsonl", b"\x07\xff\x02" + side(allow, "<-").encode())
# The interrupted session, first turn only (the file is long), small reads.
lines = [dump(m["msg"]) for m in inter if m["dir"] == "<-"]
cut = next((i for i, l in enumerate(lines) if '"type":"result"' in l), len(lines))
put("stream_json", "partial-interrupted.jsonl", b"\x01\xff\x03" + ("\n".join(lines[:cut + 1]) + "\n").encode())
put("stream_json", "oversize.jsonl", b"\x10\x08\x00" + b'{"type":"keep_alive"}\n' + b'{"type":"system","subtype":"status","pad":"' + b"x" * 80 + b'"}\n{"type":"result","subtype":"success","result":"ok"}')

# Control protocol: every control frame, both directions.
def control(msgs):
    return "".join(dump(m["msg"]) + "\n" for m in msgs if m["dir"] in ("->", "<-") and str(m["msg"].get("type", "")).startswith("control"))
put("control", "allow.jsonl", control(allow))
put("control", "interrupt.jsonl", control(inter))
ask = {"type": "control_request", "request_id": "r9", "request": {"subtype": "can_use_tool", "tool_name": "AskUserQuestion", "tool_use_id": "toolu_q",
       "input": {"questions": [{"question": "Which color?", "header": "Color", "multiSelect": False,
                                 "options": [{"label": "Red", "description": "warm"}, {"label": "Blue"}]},
                                {"question": "Which sizes?", "header": "Size", "multiSelect": True, "options": [{"label": "S"}, {"label": "L"}]}]}}}
put("control", "ask.jsonl", dump(ask) + "\n" + dump({"type": "control_cancel_request", "request_id": "r9"}) + "\n")

# Transcripts: the real one, and its first lines.
with open(os.path.join(SAMPLES, "transcript_2.1.330.jsonl"), "rb") as f:
    t = f.read()
put("transcript", "full.jsonl", t)
put("transcript", "head.jsonl", b"\n".join(t.split(b"\n")[:12]) + b"\n")
put("transcript", "cycle.jsonl", b'{"type":"user","uuid":"a","parentUuid":"b","message":{"role":"user","content":"hi"}}\n{"type":"assistant","uuid":"b","parentUuid":"a","message":{"role":"assistant","content":[{"type":"text","text":"yo"}]}}\nnot json\n')

# AHP: VS Code's start, a turn with attachments, the actions a client dispatches.
def rpc(method, params, id=None):
    m = {"jsonrpc": "2.0", "method": method, "params": params}
    if id is not None:
        m["id"] = id
    return dump(m)
def dispatch(channel, action, seq):
    return rpc("dispatchAction", {"channel": channel, "clientSeq": seq, "action": action})
chat = "ahp-session://s1/chat"
sess = "ahp-session://s1"
msg = {"text": "Fix the failing test in #file:foo.ts", "origin": {"kind": "user"},
       "attachments": [{"type": "resource", "uri": "file:///home/me/proj/foo.ts", "label": "foo.ts", "displayKind": "selection",
                        "selection": {"range": {"start": {"line": 1, "character": 0}, "end": {"line": 3, "character": 1}}}},
                       {"type": "simple", "label": "Workspace", "displayKind": "workspace", "modelRepresentation": "TS project"}],
       "model": {"id": "claude-sonnet-4-5", "config": {"thinkingLevel": "high"}}}
start = [
    rpc("initialize", {"channel": "ahp-root://", "protocolVersions": ["0.3.0"], "clientId": "c1",
                       "clientInfo": {"name": "vscode-agents-window", "title": "VS Code Agents Window"},
                       "initialSubscriptions": ["ahp-root://"], "_meta": {"vscode.telemetryLevel": "all"}}, 1),
    dispatch("ahp-root://", {"type": "root/configChanged", "config": {"telemetryLevel": "all"}}, 0),
    dispatch("ahp-root://", {"type": "root/configChanged", "config": {"workspaceTrust": {"enabled": True, "trustedUris": ["file:///home/me/proj"]}}}, 0),
    rpc("setClientManagedSettingsPermissions", {"permissions": {}}),
    rpc("createSession", {"channel": sess, "provider": "claude", "config": {"model": "claude-sonnet-4-5"}}, 2),
    rpc("subscribe", {"channel": chat}, 3),
    rpc("listSessions", {}, 4),
    rpc("ping", {}, "p"),
]
put("ahp", "vscode-start.jsonl", "\n".join(start) + "\n")
turn = [
    dispatch(chat, {"type": "chat/turnStarted", "turnId": "t1", "startedAt": "2026-05-01T10:01:00.000Z", "message": msg}, 1),
    dispatch(chat, {"type": "chat/toolCallConfirmed", "turnId": "t1", "toolCallId": "toolu_1", "approved": True, "confirmed": "user-action", "selectedOptionId": "allow-once"}, 2),
    dispatch(chat, {"type": "chat/pendingMessageSet", "kind": "steering", "id": "st1", "message": {"text": "also update the docs", "origin": {"kind": "user"}}}, 3),
    dispatch(chat, {"type": "chat/turnCancelled", "turnId": "t1", "duration": 3150}, 4),
    dispatch(sess, {"type": "session/isReadChanged", "isRead": True}, 5),
    dispatch(sess, {"type": "session/titleChanged", "title": "Fix tests"}, 6),
    dispatch(sess, {"type": "session/configChanged", "config": {"autoApprove": "assisted", "model": "claude-opus-4-6"}}, 7),
    dispatch(chat, {"type": "chat/draftChanged", "draft": {"text": "half a"}}, 8),
    dispatch(chat, {"type": "chat/brandNew", "x": 1}, 9),
]
put("ahp", "turn.jsonl", "\n".join(turn) + "\n")
bad = ['{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', '[1,2]', '{"jsonrpc":"1.0","id":1,"method":"x"}', '{"jsonrpc":"2.0","id":7,"result":{}}',
       '{"jsonrpc":"2.0","id":8,"method":"resourceRead","params":{"uri":"file:///etc/passwd"}}', '{"jsonrpc":"2.0","id":9,"method":"m","params":[1]}', 'nope']
put("ahp", "malformed.jsonl", "\n".join(bad) + "\n")
