// Refreshes the dashboard in place while the tab is visible. The page is
// complete without this script; it only saves pressing reload, and swapping
// the content instead of reloading keeps the scroll position and avoids a
// flash. The server's CSP allows scripts from this origin only.
(function () {
  "use strict";
  var page = document.getElementById("page");
  if (!page || !window.fetch || !window.DOMParser) {
    return;
  }
  var seconds = parseInt(page.getAttribute("data-refresh"), 10) || 5;

  function schedule() {
    window.setTimeout(tick, seconds * 1000);
  }

  function markStale() {
    var stale = document.getElementById("stale");
    if (stale) {
      stale.hidden = false;
    }
  }

  function tick() {
    if (document.hidden) {
      schedule();
      return;
    }
    window.fetch(window.location.href, { headers: { Accept: "text/html" }, cache: "no-store" })
      .then(function (resp) {
        if (!resp.ok) {
          throw new Error("status " + resp.status);
        }
        return resp.text();
      })
      .then(function (html) {
        // DOMParser never runs scripts, and the server escaped every value.
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("page");
        var current = document.getElementById("page");
        if (!fresh || !current) {
          throw new Error("page without content");
        }
        current.replaceWith(document.adoptNode(fresh));
        document.title = doc.title;
      })
      .catch(markStale)
      .then(schedule);
  }

  schedule();
})();
