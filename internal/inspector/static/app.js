// agentlog inspector: live updates over Server-Sent Events and lazy chunk text. The pages work
// without it; every HTML it inserts was rendered (and escaped) by the server.
(function () {
  "use strict";
  var body = document.body;
  var status = document.getElementById("live-status");
  function setStatus(text, on) {
    if (!status) return;
    status.textContent = text;
    status.className = on ? "live on" : "live";
  }
  function fragment(html) {
    var t = document.createElement("template");
    t.innerHTML = html;
    return t.content;
  }
  // replace swaps an element's content, keeping the open/closed state of its <details id=...>
  // and what was typed into its <textarea id=...> (an edit-then-fork form being written).
  function replace(id, html) {
    var el = document.getElementById(id);
    if (!el || html === undefined || html === null) return;
    var state = {}, typed = {};
    el.querySelectorAll("details[id]").forEach(function (d) { state[d.id] = d.open; });
    el.querySelectorAll("textarea[id]").forEach(function (a) { if (a.value !== a.defaultValue) typed[a.id] = a.value; });
    var focused = document.activeElement && el.contains(document.activeElement) ? document.activeElement.id : "";
    el.replaceChildren(fragment(html));
    el.querySelectorAll("details[id]").forEach(function (d) { if (d.id in state) d.open = state[d.id]; });
    el.querySelectorAll("textarea[id]").forEach(function (a) { if (a.id in typed) a.value = typed[a.id]; });
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
  }
  function listPage() {
    var q = "?prefix=" + encodeURIComponent(body.dataset.prefix || "");
    var es = new EventSource("/live" + q);
    es.onopen = function () { setStatus("live", true); };
    es.onerror = function () { setStatus("reconnecting…", false); };
    es.addEventListener("session", function (e) {
      var d = JSON.parse(e.data);
      var rows = document.getElementById("session-rows");
      var exists = Array.prototype.some.call(rows.children, function (tr) { return tr.dataset.id === d.id; });
      if (exists) return;
      var empty = rows.querySelector("tr.empty");
      if (empty) empty.remove();
      rows.prepend(fragment(d.html));
    });
  }
  function sessionPage() {
    var base = body.dataset.base;
    var main = document.getElementById("session-main");
    if (!main) return; // the session could not be read
    var q = "?after=" + encodeURIComponent(main.dataset.lastSeq) + "&pos=" + encodeURIComponent(main.dataset.streamSeq || "0") + "&page=" + encodeURIComponent(main.dataset.pageIndex) +
      "&last=" + (main.dataset.lastPage === "1" ? "1" : "0") + "&all=" + (main.dataset.all === "true" ? "1" : "0");
    var es = new EventSource(base + "/live" + q);
    es.onopen = function () { setStatus("live · seq " + main.dataset.lastSeq, true); };
    es.onerror = function () { setStatus("reconnecting…", false); };
    es.addEventListener("update", function (e) {
      var u = JSON.parse(e.data);
      replace("summary", u.summary);
      replace("views", u.views);
      replace("projections", u.projections);
      replace("boundaries-list", u.boundaries);
      if (u.timeline) { replace("timeline", u.timeline); replace("pager", u.pager); }
      main.dataset.lastSeq = String(u.lastSeq);
      setStatus("live · seq " + u.lastSeq, true);
    });
    es.addEventListener("tree", function (e) { replace("tree", JSON.parse(e.data).html); });
    es.addEventListener("failed", function (e) { setStatus(JSON.parse(e.data).error, false); es.close(); });
    document.addEventListener("toggle", function (e) {
      var d = e.target;
      if (d.matches && d.matches("details.ev-json") && d.open && !d.dataset.loaded) {
        d.dataset.loaded = "1";
        var a = d.querySelector("a.ev-raw");
        fetch(a.href, { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
          .then(function (text) { var pre = document.createElement("pre"); pre.textContent = text; d.appendChild(pre); })
          .catch(function () { delete d.dataset.loaded; });
        return;
      }
      if (!d.matches || !d.matches("details.chunks") || !d.open || d.dataset.loaded) return;
      d.dataset.loaded = "1";
      fetch(base + "/chunks?fragment=1&from=" + d.dataset.from + "&to=" + d.dataset.to, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) { d.querySelector(".chunk-text").replaceChildren(fragment(html)); })
        .catch(function () { delete d.dataset.loaded; });
    }, true);
    // A message's JSON cut at its size limit: the link loads the whole event in its place.
    document.addEventListener("click", function (e) {
      var a = e.target.closest ? e.target.closest("a.ev-full") : null;
      if (!a) return;
      e.preventDefault();
      fetch(a.href, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (text) {
          var p = a.parentNode;
          p.closest("details").querySelector("pre").textContent = text;
          p.textContent = "the whole event, as stored";
        })
        .catch(function () { window.location.href = a.href; });
    });
  }
  // Tabs: main[data-tab] names the section shown, the one the URL's fragment names or holds (a
  // row, #seq-12), else the server's default. (Without the script the stylesheet does the same
  // with :target, which a live update replacing the target would lose.)
  function tabs() {
    var main = document.getElementById("session-main");
    if (!main) return;
    function pick() {
      var id = "";
      try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { id = ""; }
      var el = id ? document.getElementById(id) : null;
      var tab = el && el.closest ? el.closest("section.tab") : null;
      if (tab) main.dataset.tab = tab.id.replace(/^tab-/, "");
      else if (!main.dataset.tab) main.dataset.tab = main.dataset.defaultTab || "conversation";
      if (el && tab) el.scrollIntoView();
    }
    pick();
    window.addEventListener("hashchange", pick);
  }
  if (body.dataset.page === "session") tabs();
  if (!window.EventSource) return;
  if (body.dataset.page === "list") listPage();
  if (body.dataset.page === "session") sessionPage();
})();
