// The overview's live part over server-sent events (R47): each event is the part as
// /live draws it, rendered once per refresh for every viewer. While the stream
// delivers, htmx's polling of /live is held back; when it breaks (a proxy that buffers,
// a restart), polling takes over until the browser has the stream back. A hidden tab
// holds no stream and polls nothing: a browser gives a host only a few connections,
// and a stream keeps one.
(function () {
  "use strict";
  var part = document.getElementById("live");
  if (!part || !part.dataset.events || !window.EventSource) {
    return;
  }
  var source = null;
  var streaming = false;
  part.addEventListener("htmx:beforeRequest", function (event) {
    if (streaming || document.hidden) {
      event.preventDefault();
    }
  });
  function open() {
    source = new EventSource(part.dataset.events);
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
  }
  function close() {
    if (source) {
      source.close();
      source = null;
    }
    streaming = false;
  }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      close();
    } else if (!source) {
      open();
    }
  });
  // Leaving the page ends the stream at once, not when the browser gets round to it.
  window.addEventListener("pagehide", close);
  if (!document.hidden) {
    open();
  }
})();
