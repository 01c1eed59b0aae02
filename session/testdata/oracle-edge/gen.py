import json, os
H = '{"type":"session","version":0,"id":"edge","createdAt":1,"cwd":"/w"}'
def ev(seq, typ, data, t=1000, **kw):
    d = {"type": typ, "seq": seq, "time": t + seq, "data": data}
    d.update(kw)
    return json.dumps(d, separators=(',', ':'), ensure_ascii=False)
def um(i, text="hi"): return {"id": "u%d" % i, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}}
def am(turn, step, content, i=0): return {"turn": turn, "step": step, "message": {"id": "a%d" % i, "role": "assistant", "content": content, "source": {"kind": "model", "provider": "p", "model": "m"}}}
def tr(turn, step, cid, text="ok", i=0, **extra):
    d = {"turn": turn, "step": step, "message": {"id": "t%d" % i, "role": "user", "content": [{"type": "tool-result", "toolCallId": cid, "content": [{"type": "text", "text": text}]}], "source": {"kind": "tool", "callId": cid}}}
    d.update(extra); return d
cases = {}
def case(name, lines, header=True): cases[name] = ([H] if header else []) + lines

case("empty", [], header=False)
case("only-header", [])
case("no-header", [ev(0, "turn/start", {"turn": 1}), ev(1, "user/message", um(1), surfaceOp="append"), ev(2, "turn/end", {"turn": 1, "reason": {"kind": "completed"}})], header=False)
case("syntax-error", [ev(0, "turn/start", {"turn": 1}), '{"type":"turn/end",', ev(1, "turn/end", {"turn": 1})])
case("seq-gap", [ev(0, "turn/start", {"turn": 1}), ev(2, "turn/end", {"turn": 1})])
case("no-surfaceop", [ev(0, "user/message", um(1))])
case("surfaceop-on-nonsurface", [ev(0, "turn/start", {"turn": 1}, surfaceOp="append")])
case("sources-on-nonsurface", [ev(0, "turn/start", {"turn": 1}, sourceEventSeqs=[0])])
base3 = [ev(0, "user/message", um(0), surfaceOp="append"), ev(1, "user/message", um(1), surfaceOp="append"), ev(2, "user/message", um(2), surfaceOp="append")]
case("replace-start-missing", base3 + [ev(3, "user/message", um(3), surfaceOp={"op": "replace", "start": 7, "end": 1}, sourceEventSeqs=[1])])
case("replace-end-missing", base3 + [ev(3, "user/message", um(3), surfaceOp={"op": "replace", "start": 0, "end": 9}, sourceEventSeqs=[0])])
case("replace-order", base3 + [ev(3, "user/message", um(3), surfaceOp={"op": "replace", "start": 2, "end": 0}, sourceEventSeqs=[0, 2])])
case("replace-coverage", base3 + [ev(3, "user/message", um(3), surfaceOp={"op": "replace", "start": 0, "end": 2}, sourceEventSeqs=[0, 2])])
case("replace-ok-then-again", base3 + [ev(3, "user/message", um(3, "sum"), surfaceOp={"op": "replace", "start": 0, "end": 1}, sourceEventSeqs=[0, 1]), ev(4, "user/message", um(4, "sum2"), surfaceOp={"op": "replace", "start": 3, "end": 2}, sourceEventSeqs=[3, 2])])
case("replace-extra-key", base3 + [ev(3, "user/message", um(3), surfaceOp={"op": "replace", "start": 0, "end": 0, "x": 1}, sourceEventSeqs=[0])])
case("surfaceop-null", [ev(0, "user/message", um(0), surfaceOp=None)])
case("surfaceop-string", [ev(0, "user/message", um(0), surfaceOp="replace")])
case("sources-not-array", [ev(0, "user/message", um(0), surfaceOp="append"), ev(1, "user/message", um(1), surfaceOp="append", sourceEventSeqs={"a": 0})])
case("sources-empty", [ev(0, "user/message", um(0), surfaceOp="append", sourceEventSeqs=[])])
case("sources-empty-assistant", [ev(0, "turn/start", {"turn": 1}), ev(1, "assistant/message", am(1, 1, [{"type": "text", "text": "x"}]), surfaceOp="append", sourceEventSeqs=[]), ev(2, "turn/end", {"turn": 1})])
case("sources-dup", [ev(0, "user/message", um(0), surfaceOp="append"), ev(1, "user/message", um(1), surfaceOp="append", sourceEventSeqs=[0, 0])])
case("sources-later", [ev(0, "user/message", um(0), surfaceOp="append", sourceEventSeqs=[0])])
case("sources-bad-elem", [ev(0, "user/message", um(0), surfaceOp="append"), ev(1, "user/message", um(1), surfaceOp="append", sourceEventSeqs=[0, 1.5, 9, 9])])
trbase = [ev(0, "turn/start", {"turn": 1}), ev(1, "step/start", {"turn": 1, "step": 1}), ev(2, "assistant/message", am(1, 1, [{"type": "tool-call", "id": "c1", "name": "x", "arguments": "{}"}, {"type": "tool-call", "id": "c2", "name": "x", "arguments": "{}"}]), surfaceOp="append"),
          ev(3, "tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "x", "arguments": "{}"}), ev(4, "tool/result", tr(1, 1, "c1", i=4), surfaceOp="append"), ev(5, "tool/result", tr(1, 1, "c2", i=5), surfaceOp="append")]
case("tool-replace-ok", trbase + [ev(6, "tool/result", tr(1, 1, "c1", "shorter", i=4), surfaceOp={"op": "replace", "start": 4, "end": 4}, sourceEventSeqs=[4]), ev(7, "step/end", {"turn": 1, "step": 1}), ev(8, "turn/end", {"turn": 1, "reason": {"kind": "completed"}})])
case("tool-replace-span2", trbase + [ev(6, "tool/result", tr(1, 1, "c1", "x", i=4), surfaceOp={"op": "replace", "start": 4, "end": 5}, sourceEventSeqs=[4, 5])])
case("tool-replace-target-assistant", trbase + [ev(6, "tool/result", tr(1, 1, "c1", "x", i=4), surfaceOp={"op": "replace", "start": 2, "end": 2}, sourceEventSeqs=[2])])
case("tool-replace-change-id", trbase + [ev(6, "tool/result", tr(1, 1, "c1", "x", i=99), surfaceOp={"op": "replace", "start": 4, "end": 4}, sourceEventSeqs=[4])])
case("tool-replace-add-meta", trbase + [ev(6, "tool/result", tr(1, 1, "c1", "x", i=4, meta={"a": 1}), surfaceOp={"op": "replace", "start": 4, "end": 4}, sourceEventSeqs=[4])])
case("open-turn-pending-calls", trbase[:4] + [ev(4, "assistant/message", am(1, 1, [{"type": "tool-call", "id": "c3", "name": "x", "arguments": "{}"}, {"type": "tool-call", "id": "c1", "name": "y", "arguments": "{}"}], i=2), surfaceOp="append")])
case("open-turn-resets", trbase + [ev(6, "step/end", {"turn": 1, "step": 1}), ev(7, "step/start", {"turn": 1, "step": 2}), ev(8, "assistant/message", am(1, 2, [{"type": "tool-call", "id": "k1"}, {"type": "tool-call", "id": "k2"}, {"type": "tool-call", "id": "k1"}], i=3), surfaceOp="append"), ev(9, "tool/call", {"callId": "k2"}), ev(10, "tool/result", tr(1, 2, "k1", i=10), surfaceOp="append"), ev(11, "assistant/message", am(1, 2, [{"type": "tool-call", "id": "k1"}, {"type": "tool-call", "id": 7}, {"type": "tool-call"}], i=4), surfaceOp="append"), ev(12, "tool/call", {"callId": 7.0})])
case("open-step-only", [ev(0, "turn/start", {"turn": 3}), ev(1, "step/start", {"turn": 3, "step": 1})])
case("negzero-data", [ev(0, "turn/start", {"turn": 1}), '{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"x":-0.0}}'])
case("inf-data", [ev(0, "turn/start", {"turn": 1}), '{"type":"turn/end","seq":1,"time":5,"data":{"turn":1,"x":1e400}}'])
case("inf-surface-meta", [ev(0, "user/message", um(0), surfaceOp="append"), '{"type":"user/message","seq":1,"time":5,"data":{"id":"x"},"surfaceOp":"append","sourceEventSeqs":[-0]}'])
case("inf-time-open", [ev(0, "turn/start", {"turn": 1}), '{"type":"step/start","seq":1,"time":1e400,"data":{"turn":1,"step":1}}'])
case("frac-time-fork", [ev(0, "turn/start", {"turn": 1}), '{"type":"turn/end","seq":1,"time":5.5,"data":{"turn":1}}', ev(2, "x/y", {})])
case("header-delta", [ev(0, "request/header-delta", {"a": 1})])
case("header-fallback", [ev(0, "turn/start", {"turn": 1}), ev(1, "request/header", {"header": {"config": {"provider": "p", "model": "m"}}, "reason": "fallback"})])
case("header-lacks-provider", [ev(0, "request/header", {"header": {"config": {"provider": "p"}}, "reason": "initial"}), ev(1, "x/y", {})])
case("header-bad-effort", [ev(0, "request/header", {"header": {"config": {"provider": "p", "model": "m", "reasoningEffort": ""}}, "reason": "initial"})])
case("header-bad-adapter", [ev(0, "request/header", {"header": {"config": {"provider": "p", "model": "m"}, "adapterDefaults": {"maxTokens": True}}, "reason": "initial"}), ev(1, "request/header", {"header": {"config": {"provider": "p", "model": "m", "maxTokens": 5}, "adapterDefaults": {"maxTokens": True}}, "reason": "change"})])
case("lines-odd", [ev(0, "turn/start", {"turn": 1}), "null", ev(2, "turn/end", {"turn": 1})])
case("line-array", [ev(0, "turn/start", {"turn": 1}), "[1,2]"])
case("line-number", ["5"])
case("data-missing", [ev(0, "turn/start", {"turn": 1}), '{"type":"turn/end","seq":1,"time":4}'])
case("seq-float-forms", ['{"type":"turn/start","seq":-0,"time":1,"data":{"turn":1}}', '{"type":"turn/end","seq":1.0,"time":2,"data":{"turn":1}}', '{"type":"x/y","seq":2e0,"time":3,"data":{}}'])
case("dup-keys", ['{"type":"user/message","seq":0,"time":1,"data":{"id":"a","role":"user","content":[],"source":{"kind":"user"},"id":"b","2":"two","10":"ten","1":"one"},"surfaceOp":"append","type":"user/message"}'])
case("canonical-numbers", [ev(0, "user/message", {"id": "a", "role": "user", "content": [{"type": "text", "text": "x"}], "source": {"kind": "user"}, "n": [1.0, 1e2, 0.000001, 1e-7, 123456789012345678901234, 1.5e300, -2.50]}, surfaceOp="append").replace('"n":[1.0,100.0,1e-06,1e-07,1.2345678901234568e+23,1.5e+300,-2.5]', '"n":[1.0,1e2,0.000001,1e-7,123456789012345678901234,1.5e300,-2.50,1E+21,0.1e1]')])
case("unicode", ['{"type":"user/message","seq":0,"time":1,"data":{"id":"\\u00e9\\ud83d\\ude00\\ud800x\\u2028","role":"user","content":[{"type":"text","text":"<&>\\/\\u0001\\u007f é 😀"}],"source":{"kind":"user"}},"surfaceOp":"append"}'])
case("empty-assistant", [ev(0, "turn/start", {"turn": 1}), ev(1, "step/start", {"turn": 1, "step": 1}), ev(2, "assistant/message", am(1, 1, []), surfaceOp="append"), ev(3, "step/end", {"turn": 1, "step": 1}), ev(4, "assistant/message", am(1, 1, "", i=1), surfaceOp="append"), ev(5, "turn/end", {"turn": 1})])
case("string-content", [ev(0, "turn/start", {"turn": 1}), ev(1, "assistant/message", am(1, 1, "abc"), surfaceOp="append"), ev(2, "turn/end", {"turn": 1})])
case("old-format-replaced", [ev(0, "turn/start", {"turn": 1}), ev(1, "assistant/message", {"turn": 1, "step": 1, "content": []}, surfaceOp="append"), ev(2, "assistant/message", am(1, 1, [{"type": "text", "text": "x"}]), surfaceOp={"op": "replace", "start": 1, "end": 1}, sourceEventSeqs=[1]), ev(3, "turn/end", {"turn": 1})])
case("old-format-tool-result-only", [ev(0, "turn/start", {"turn": 1}), ev(1, "tool/result", {"turn": 1, "step": 1, "callId": "c", "content": []}, surfaceOp="append"), ev(2, "turn/end", {"turn": 1})])
case("turn-null-data", [ev(0, "turn/start", None)])
case("turn-null-data-closed", [ev(0, "turn/start", None), ev(1, "turn/end", None)])
case("turn-string", [ev(0, "turn/start", {"turn": "x"}), ev(1, "step/start", {})])
case("turn-undefined", [ev(0, "turn/start", {}), ev(1, "assistant/message", {"message": {"content": [{"type": "tool-call"}]}}, surfaceOp="append")])
case("null-block", [ev(0, "turn/start", {"turn": 1}), ev(1, "assistant/message", am(1, 1, [None]), surfaceOp="append")])
case("header-id-number", ['{"type":"session","id":5}', ev(0, "turn/start", {"turn": 1})], header=False)
case("header-only-bom", ['\ufeff' + H], header=False)
case("blank-lines", ["", "   ", "\t", ev(0, "turn/start", {"turn": 1}) + "\r", "\u00a0"], header=True)
case("crlf", [ev(0, "turn/start", {"turn": 1}) + "\r", ev(1, "turn/end", {"turn": 1}) + "\r"])
case("end-seed-tail", [ev(0, "turn/start", {"turn": 1}), ev(1, "turn/end", {"turn": 1}), ev(2, "session/end-seed", {})])
case("fork-user-no-id", [ev(0, "turn/start", {"turn": 1}), ev(1, "turn/end", {"turn": 1}), ev(2, "user/message", {"role": "user", "content": [], "source": {"kind": "user"}}, surfaceOp="append"), ev(3, "x", {})])
case("fork-bad-tool-shape", [ev(0, "turn/start", {"turn": 1}), ev(1, "tool/result", tr(1, 1, "c", i=1) | {"message": {"id": "m", "role": "user", "source": {"kind": "tool", "callId": "c"}, "content": [{"type": "tool-result", "toolCallId": "d", "content": []}]}}, surfaceOp="append"), ev(2, "turn/end", {"turn": 1})])
case("ignorable-and-unknown", ['{"type":"x/new","seq":0,"time":1,"data":{},"ignorable":true,"extra":1}', '{"type":"x/new2","seq":1,"time":2,"data":{},"ignorable":false}'])
case("type-missing", ['{"seq":0,"time":1,"data":{}}'])
case("chunk-rows", [ev(0, "turn/start", {"turn": 1}), ev(1, "step/start", {"turn": 1, "step": 1}),
    '{"type":"text-chunks","seq0":2,"time0":100,"data":{"turn":1,"step":1,"index":0,"dt":[1,2],"texts":["a","b","c"]}}',
    '{"type":"reasoning-chunks","seq0":5,"time0":90,"data":{"turn":1,"step":1,"index":1,"dt":[0,-5,3],"texts":["r","s","t","u"]}}',
    '{"type":"tool-call-chunks","seq0":9,"time0":200,"data":{"turn":1,"step":1,"index":2,"id":"c1","name":"bash","dt":[1],"args":["{","}"]}}',
    '{"type":"tool-call-chunks","seq0":11,"time0":200,"data":{"turn":1,"step":1,"index":2,"id":"c1","dt":[],"args":["x"]}}',
    ev(12, "step/end", {"turn": 1, "step": 1}), ev(13, "turn/end", {"turn": 1})])
for i, (why, row) in enumerate([
    ("extra-key", '{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]},"x":1}'),
    ("seq0", '{"type":"text-chunks","seq0":-1,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}'),
    ("time0", '{"type":"text-chunks","seq0":0,"time0":1.5,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}'),
    ("data", '{"type":"text-chunks","seq0":0,"time0":1,"data":5}'),
    ("data-keys", '{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"],"y":2}}'),
    ("tool-keys", '{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}'),
    ("tool-id", '{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"id":3,"dt":[],"args":["a"]}}'),
    ("numbers", '{"type":"reasoning-chunks","seq0":0,"time0":1,"data":{"turn":"1","step":1,"index":0,"dt":[],"texts":["a"]}}'),
    ("texts", '{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":[]}}'),
    ("dt", '{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[0.5],"texts":["a","b"]}}'),
    ("dt-len", '{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["a","b"]}}'),
    ("member-time", '{"type":"text-chunks","seq0":0,"time0":9007199254740990,"data":{"turn":1,"step":1,"index":0,"dt":[5],"texts":["a","b"]}}'),
    ("member-seq", '{"type":"text-chunks","seq0":9007199254740991,"time0":1,"data":{"turn":1,"step":1,"index":0,"dt":[1],"texts":["a","b"]}}'),
    ("negzero-index", '{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":1,"index":-0,"dt":[],"texts":["a"]}}'),
]):
    case("row-" + why, [ev(0, "turn/start", {"turn": 1}), row] if why != "negzero-index" else [row])
for name, (lines) in cases.items():
    with open(name + ".jsonl", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
print(len(cases))
