(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var every = (Number(live.getAttribute("data-refresh")) || 5) * 1000;
  var source = live.getAttribute("data-src");
  function swap(doc, id) {
    var fresh = doc.getElementById(id);
    var old = document.getElementById(id);
    if (fresh && old) { old.replaceWith(document.importNode(fresh, true)); }
  }
  function tick() {
    fetch(source, { credentials: "same-origin", cache: "no-store", redirect: "error" })
      .then(function (answer) {
        if (answer.status === 401) { window.location.reload(); throw new Error("signed out"); }
        if (!answer.ok) { throw new Error("status " + answer.status); }
        return answer.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        swap(doc, "updated");
        swap(doc, "pools");
        live.removeAttribute("data-stale");
      })
      .catch(function () { live.setAttribute("data-stale", "true"); })
      .finally(function () { window.setTimeout(tick, every); });
  }
  window.setTimeout(tick, every);
}());
