"use strict";
// The Blueque admin pages: live data (charts included), bulk jobs, selecting a page's rows.
(function () {
  function field(root, name) {
    return root.querySelector('[data-bq-field="' + name + '"]');
  }

  function setText(root, name, text) {
    const element = field(root, name);
    if (element) {
      element.textContent = text;
    }
  }

  // Live pages: every few seconds one small JSON request (the page's URL with live=1, see
  // views/live.py) refreshes the texts marked data-bq-live, the progress bars and the charts;
  // when the rows a page lists change, it reloads, unless the user is choosing rows or typing
  // (then it says so). The "Live" box turns it off, for every Blueque page of this browser.
  const root = document.querySelector("[data-bq-live-url]");
  const toggle = document.getElementById("blueque-live");
  if (root && toggle) {
    const period = 1000 * Number(root.dataset.bqPoll || 3);
    const changed = document.getElementById("blueque-changed");
    let timer = null;
    toggle.checked = window.localStorage.getItem("blueque-live") !== "off";
    toggle.closest("label").hidden = false;

    const busy = function () {
      const active = document.activeElement;
      return root.querySelector("input.action-select:checked") ||
        (active && root.contains(active) && active.matches("input, select, textarea"));
    };

    const apply = function (data) {
      const marked = {};
      root.querySelectorAll("[data-bq-live]").forEach(function (element) {
        (marked[element.dataset.bqLive] = marked[element.dataset.bqLive] || []).push(element);
      });
      Object.entries(data.text || {}).forEach(function ([key, text]) {
        (marked[key] || []).forEach(function (element) { element.textContent = text; });
      });
      Object.entries(data.values || {}).forEach(function ([key, value]) {
        root.querySelectorAll('[data-bq-value="' + key + '"]').forEach(function (element) {
          if (value !== null) {
            element.value = value;
          }
        });
      });
      // the charts, drawn by the server (charts.py): each one's SVG replaced whole
      const charts = data.charts || {};
      root.querySelectorAll("[data-bq-chart]").forEach(function (box) {
        if (charts[box.dataset.bqChart]) {
          box.innerHTML = charts[box.dataset.bqChart];
        }
      });
    };

    const poll = async function () {
      if (!toggle.checked) {
        return;
      }
      if (!document.hidden) {
        try {
          const response = await fetch(root.dataset.bqLiveUrl, {
            headers: {Accept: "application/json"}, credentials: "same-origin"});
          if (response.status === 404) {  // the task was deleted meanwhile: say so
            window.location.reload();
            return;
          }
          if (response.ok) {
            const data = await response.json();
            if (data.version !== root.dataset.bqVersion) {
              if (!busy()) {
                window.location.reload();
                return;
              }
              changed.hidden = false;
            }
            apply(data);
          }
        } catch (error) {
          // the server is restarting or the network hiccuped: try again later
        }
      }
      timer = window.setTimeout(poll, period);
    };

    toggle.addEventListener("change", function () {
      window.localStorage.setItem("blueque-live", toggle.checked ? "on" : "off");
      window.clearTimeout(timer);
      if (toggle.checked) {
        poll();
      }
    });
    timer = window.setTimeout(poll, period);
  }

  // Bulk job page: run the job's next batches (a POST of a fraction of a second each) until
  // it ends, showing its progress.
  const job = document.querySelector("[data-bq-step-url]");
  if (job) {
    const form = job.querySelector("form.blueque-step");
    const step = async function () {
      let delay = 2000;
      try {
        const response = await fetch(job.dataset.bqStepUrl, {
          method: "POST", body: new FormData(form), credentials: "same-origin",
          headers: {Accept: "application/json"}});
        if (response.ok) {
          const data = await response.json();
          setText(job, "status", data.status);
          setText(job, "processed", data.processed);
          setText(job, "affected", data.affected);
          setText(job, "percent", Math.floor(data.percent) + "%");
          const bar = field(job, "progress");
          if (bar) {
            bar.value = data.percent;
          }
          if (data.status !== "running") {
            window.location.reload();
            return;
          }
          delay = 50;
        }
      } catch (error) {
        // try again later
      }
      window.setTimeout(step, delay);
    };
    step();
  }

  // List page: the header's checkbox selects every row of the page.
  document.querySelectorAll(".blueque-toggle").forEach(function (toggle) {
    toggle.addEventListener("change", function () {
      document.querySelectorAll("#result_list input.action-select").forEach(function (box) {
        box.checked = toggle.checked;
      });
    });
  });
})();
