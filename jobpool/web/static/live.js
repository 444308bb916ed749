// The overview's live part over server-sent events (R47): each event is the part as
// /live draws it, rendered once per refresh for every viewer. While the stream
// delivers, htmx's polling of /live is held back; when it breaks (a proxy that buffers,
// a restart), polling takes over until the browser has the stream back.
(function () {
  "use strict";
  var part = document.getElementById("live");
  if (!part || !part.dataset.events || !window.EventSource) {
    return;
  }
  var streaming = false;
  part.addEventListener("htmx:beforeRequest", function (event) {
    if (streaming) {
      event.preventDefault();
    }
  });
  var source = new EventSource(part.dataset.events);
  source.addEventListener("overview", function (event) {
    streaming = true;
    part.innerHTML = event.data;
    if (window.htmx) {
      window.htmx.process(part);
    }
  });
  source.addEventListener("error", function () {
    streaming = false;
  });
  // Leaving the page ends the stream at once, not when the browser gets round to it.
  window.addEventListener("pagehide", function () {
    source.close();
  });
})();
