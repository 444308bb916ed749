// The jobs list's "select all on this page" box (R47): it ticks or clears every row's
// box; the "… selected" buttons post the ticked ids.
(function () {
  "use strict";
  var all = document.getElementById("select-all");
  if (!all) {
    return;
  }
  var boxes = document.querySelectorAll('input[type=checkbox][name=id][form=selected]');
  all.addEventListener("change", function () {
    boxes.forEach(function (box) {
      box.checked = all.checked;
    });
  });
})();
