// agentlog web view: keeps an open thread page live. Everything else works without it.
// New rows come from the server already escaped (the same rendering as the page).
(function () {
  "use strict";
  var table = document.getElementById("timeline");
  if (!table || table.dataset.live !== "1") return;
  var status = document.getElementById("live");
  var url = table.dataset.poll;  // by the query: a path cannot carry the thread ids "." and ".."
  var busy = false;

  function replace(id, html) {
    var el = document.getElementById(id);
    if (!el || typeof html !== "string") return;
    // What the reader opened stays open after the redraw.
    var open = Array.prototype.map.call(el.querySelectorAll("details[open][id]"), function (d) { return d.id; });
    el.innerHTML = html;
    open.forEach(function (id) { var d = document.getElementById(id); if (d) d.open = true; });
  }

  function poll() {
    if (busy || document.hidden) return;
    busy = true;
    var q = new URLSearchParams({ after: table.dataset.after, turn: table.dataset.turn, window: table.dataset.window });
    fetch(url + "&" + q.toString(), { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.json().then(function (body) { return { ok: r.ok, code: r.status, body: body }; }); })
      .then(function (answer) {
        var body = answer.body;
        if (answer.code === 401) {  // the login expired (or the token changed): log in again, then back here
          location.assign("/ui/login?" + new URLSearchParams({ next: location.pathname + location.search }).toString());
          return;
        }
        if (!answer.ok) { status.textContent = "live: " + (body.error || "the server did not answer"); return; }
        if (body.rows) {
          var tbody = table.tBodies[0];
          tbody.insertAdjacentHTML("beforeend", body.rows);
          table.dataset.after = String(body.after);
          table.dataset.turn = body.turn || "";
          table.dataset.window = body.window || "";
          replace("calls", body.calls);
          replace("state", body.state);
          status.textContent = "live: updated " + new Date().toLocaleTimeString();
        }
      })
      .catch(function () { status.textContent = "live: the server did not answer; retrying"; })
      .then(function () { busy = false; });
  }

  setInterval(poll, 1000);
})();
