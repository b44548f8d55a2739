"use strict";
// The Blueque admin pages: live data, throughput charts, bulk jobs, selecting a page's rows.
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

  // Throughput charts: per minute of the last hour, complete (bottom) and failed (on top)
  // stacked, scaled to the busiest minute of the chart.
  const SVG = "http://www.w3.org/2000/svg";
  const chartLabel = document.querySelector("[data-bq-chart-label]");

  function drawChart(svg, series) {
    const height = 40;
    const bar = 180 / series.length;
    const most = Math.max(1, ...series.map(function (minute) { return minute[1] + minute[2]; }));
    const format = chartLabel ? chartLabel.dataset.bqChartLabel : "%(time)s";
    const bars = [];
    series.forEach(function (minute, index) {
      const group = document.createElementNS(SVG, "g");
      const title = document.createElementNS(SVG, "title");
      const time = new Date(minute[0] * 1000).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit"});
      title.textContent = format.replace("%(time)s", time).replace("%(complete)s", minute[1])
        .replace("%(failed)s", minute[2]);
      group.appendChild(title);
      let top = height;
      [[minute[1], "blueque-bar-complete"], [minute[2], "blueque-bar-failed"]].forEach(function (part) {
        const size = part[0] / most * (height - 1);
        const rect = document.createElementNS(SVG, "rect");
        top -= size;
        rect.setAttribute("x", (index * bar).toFixed(2));
        rect.setAttribute("y", top.toFixed(2));
        rect.setAttribute("width", Math.max(bar - 0.6, 0.5).toFixed(2));
        rect.setAttribute("height", size.toFixed(2));
        rect.setAttribute("class", part[1]);
        group.appendChild(rect);
      });
      // the whole column answers the pointer, not only its bars
      const hit = document.createElementNS(SVG, "rect");
      hit.setAttribute("x", (index * bar).toFixed(2));
      hit.setAttribute("width", bar.toFixed(2));
      hit.setAttribute("height", height);
      hit.setAttribute("class", "blueque-bar-hit");
      group.appendChild(hit);
      bars.push(group);
    });
    const base = document.createElementNS(SVG, "line");
    base.setAttribute("x1", 0);
    base.setAttribute("x2", 180);
    base.setAttribute("y1", height - 0.5);
    base.setAttribute("y2", height - 0.5);
    base.setAttribute("class", "blueque-axis");
    svg.replaceChildren(base, ...bars);
  }

  document.querySelectorAll("svg[data-bq-series]").forEach(function (svg) {
    drawChart(svg, JSON.parse(svg.dataset.bqSeries));
  });

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
      const series = data.series || {};
      root.querySelectorAll("svg[data-bq-chart]").forEach(function (svg) {
        if (series[svg.dataset.bqChart]) {
          drawChart(svg, series[svg.dataset.bqChart]);
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
