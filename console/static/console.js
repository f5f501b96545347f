// The console's own script: keyboard shortcuts and small helpers. Pages work without it.
// Loaded from the console's origin only (the Content-Security-Policy forbids inline script).
(function () {
  "use strict";

  // typing reports whether the focus is in a control that takes text, where shortcuts are off.
  function typing(e) {
    var t = e.target;
    if (!t || !t.tagName) return false;
    var tag = t.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || t.isContentEditable;
  }

  // Pages declare their shortcuts with data-shortcut="<key>" on a link or button; the key
  // clicks it. j/k move between elements marked data-item, focusing them.
  document.addEventListener("keydown", function (e) {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || typing(e)) return;
    var items = Array.prototype.slice.call(document.querySelectorAll("[data-item]"));
    if ((e.key === "j" || e.key === "k") && items.length) {
      var i = items.indexOf(document.activeElement.closest ? document.activeElement.closest("[data-item]") : null);
      i = e.key === "j" ? Math.min(i + 1, items.length - 1) : Math.max(i - 1, 0);
      items[i].focus();
      e.preventDefault();
      return;
    }
    var scope = document.activeElement && document.activeElement.closest ? document.activeElement.closest("[data-item]") : null;
    var target = (scope || document).querySelector('[data-shortcut="' + CSS.escape(e.key) + '"]');
    if (target) {
      target.click();
      e.preventDefault();
    }
  });

  // A confirmation asked by data-confirm on a form (shutdown, preemption): the browser's own
  // dialog. Without script the form's own confirm step (a second page) applies.
  document.addEventListener("submit", function (e) {
    var msg = e.target.getAttribute && e.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) e.preventDefault();
  }, true);
})();
