/* Clear: small progressive enhancements. Every page works without this file. No trace content is ever written as
   HTML here: only textContent and attributes we control. */
(function () {
  "use strict";

  // Project switcher and other selects that navigate or submit on change.
  document.querySelectorAll("select[data-navigate]").forEach(function (select) {
    select.addEventListener("change", function () { window.location.assign(select.value); });
  });
  document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  });

  // Destructive forms ask first.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
    });
  });

  // Rubric form: picking another kind swaps in that kind's example config, unless the config was edited.
  var kindSelect = document.querySelector("select[data-config-examples]");
  var examplesNode = kindSelect && document.getElementById(kindSelect.getAttribute("data-config-examples"));
  var configArea = document.getElementById("id_config");
  if (kindSelect && examplesNode && configArea) {
    var examples = JSON.parse(examplesNode.textContent);
    kindSelect.addEventListener("change", function () {
      var current = configArea.value.trim();
      var untouched = !current || Object.keys(examples).some(function (k) { return examples[k].trim() === current; });
      if (untouched && examples[kindSelect.value]) { configArea.value = examples[kindSelect.value]; }
    });
  }

  // Trace viewer: bring the selected span into view (?span=<id> opens the viewer at it).
  var selected = document.querySelector(".span-row.selected");
  if (selected && new URLSearchParams(window.location.search).has("span")) {
    selected.scrollIntoView({ block: "center" });
    selected.classList.add("flash-highlight");
    var detail = document.getElementById("span-detail");
    if (detail) { detail.scrollTop = 0; }
    var mark = detail && detail.querySelector("mark");
    if (mark) { mark.scrollIntoView({ block: "nearest" }); selected.scrollIntoView({ block: "center" }); }
  }

  // Diagnosis run progress: poll the status JSON every 1.5 s until the run finishes.
  var bar = document.querySelector(".progress[data-poll]");
  if (bar && bar.getAttribute("data-finished") !== "true") {
    var url = bar.getAttribute("data-poll");
    var fill = bar.querySelector(".progress-fill");
    var text = document.querySelector("[data-testid=progress-text]");
    var money = function (value) {
      if (!value) { return "$0"; }
      return value < 1 ? "$" + Number(value.toFixed(4)).toString() : "$" + value.toFixed(2);
    };
    var set = function (field, value) {
      var node = text && text.querySelector('[data-field="' + field + '"]');
      if (node) { node.textContent = value; }
    };
    var failures = 0;
    var tick = function () {
      fetch(url, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(function (status) {
          failures = 0;
          // Width as a .w-N class of clear.css, like the server renders it (the CSP allows no style attribute).
          var width = Math.max(0, Math.min(100, Math.round(Number(status.percent) || 0)));
          fill.className = "progress-fill w-" + width + " status-" + status.status;
          bar.setAttribute("aria-valuenow", String(status.percent));
          set("percent", status.percent);
          set("done", status.done);
          set("skipped", status.skipped);
          set("total", status.total);
          set("tokens", status.tokens.toLocaleString("en-US"));
          set("cost", money(status.cost));
          set("error_count", status.error_count);
          set("status_label", status.status_label);
          if (status.finished) {
            bar.setAttribute("data-finished", "true");
            // The summary tables are rendered by the server: show them once, when the run is done.
            window.setTimeout(function () { window.location.reload(); }, 800);
          } else {
            window.setTimeout(tick, 1500);
          }
        })
        .catch(function () {
          failures += 1;
          if (failures < 20) { window.setTimeout(tick, 3000); }
        });
    };
    window.setTimeout(tick, 1000);
  }
})();

// Evolution job page (and a rollback on the releases page): poll the status JSON every 2 s; reload when its state
// moves (the page is rendered by the server), stop when it ends. The Evolve form: a fixture radio fills the script path.
(function () {
  "use strict";
  // A form sent from the page (approve, restart, stop) navigates by itself: a reload racing it would cancel the
  // submission's navigation and leave the user on the page they were leaving.
  var leaving = false;
  document.addEventListener("submit", function (event) { if (!event.defaultPrevented) { leaving = true; } });
  document.querySelectorAll("[data-evolution-poll]").forEach(function (live) {
    var url = live.getAttribute("data-evolution-poll");
    var version = live.getAttribute("data-state-version");
    var failures = 0;
    var tick = function () {
      if (leaving) { return; }
      fetch(url, { headers: { "Accept": "application/json" }, credentials: "same-origin" })
        .then(function (response) {
          if (!response.ok) { throw new Error("HTTP " + response.status); }
          return response.json();
        })
        .then(function (status) {
          failures = 0;
          if (leaving) { return; }
          if (String(status.state_version) !== version) { window.location.reload(); return; }
          var state = live.querySelector('[data-field="state"]');
          if (state) { state.textContent = status.state; }
          window.setTimeout(tick, 2000);
        })
        .catch(function () {
          failures += 1;
          if (failures < 20) { window.setTimeout(tick, 4000); }
        });
    };
    window.setTimeout(tick, 2000);
  });
  document.querySelectorAll("input[type=radio][data-fills]").forEach(function (radio) {
    radio.addEventListener("change", function () {
      var input = document.getElementById(radio.getAttribute("data-fills"));
      if (input && radio.checked) { input.value = radio.value; }
    });
  });
})();
