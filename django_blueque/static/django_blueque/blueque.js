"use strict";
// The Blueque admin pages: follow a running task, advance a bulk job, select a page's rows.
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

  // Task page: poll the task's progress while it is not finished; reload when its status
  // changes, so the page shows what the new status brings (result, error, node...).
  const task = document.querySelector("[data-bq-progress-url]");
  if (task) {
    const initial = task.dataset.bqStatus;
    const poll = async function () {
      try {
        const response = await fetch(task.dataset.bqProgressUrl, {
          headers: {Accept: "application/json"}, credentials: "same-origin"});
        if (response.status === 404) {
          window.location.reload();
          return;
        }
        if (response.ok) {
          const data = await response.json();
          if (data.status !== initial) {
            window.location.reload();
            return;
          }
          if (data.progress !== null) {
            const bar = field(task, "progress");
            if (bar) {
              bar.value = data.progress;
            }
            setText(task, "percent", Math.round(data.progress) + "%");
          }
          setText(task, "message", data.message || "");
        }
      } catch (error) {
        // the server is restarting or the network hiccuped: try again later
      }
      window.setTimeout(poll, 1000);
    };
    window.setTimeout(poll, 1000);
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
