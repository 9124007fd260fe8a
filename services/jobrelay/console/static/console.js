// The overview refreshes itself every few seconds when this runs; without JavaScript it is the
// same page, current as of its loading. Plain script, served by the API: no download elsewhere.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.fetch) {
    return;
  }
  var url = live.getAttribute("data-live-url");
  var seconds = Number(live.getAttribute("data-live-seconds")) || 5;
  var control = document.getElementById("live-control");
  var toggle = document.getElementById("live-toggle");
  if (control) {
    control.hidden = false;
  }

  function refresh() {
    if (document.hidden || (toggle && !toggle.checked)) {
      return;
    }
    fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (response) {
        // A session that ended is sent to the sign-in page: show it for real.
        if (response.redirected) {
          window.location.reload();
          return null;
        }
        // Anything but the fragment (an error for a moment): keep what is shown.
        var fragment = response.headers.get("X-Console-Fragment") === "overview";
        return response.ok && fragment ? response.text() : null;
      })
      .then(function (html) {
        if (html !== null) {
          live.innerHTML = html;
        }
      })
      .catch(function () {
        // The API is unreachable for a moment: the next tick tries again.
      });
  }

  window.setInterval(refresh, seconds * 1000);
})();
