/* Analyst pages: switches that apply on change, and Chart.js charts fed by json_script blocks.
   Every chart's data comes from the page (pre-aggregated server-side); nothing is fetched. */
(function () {
  "use strict";
  var PALETTE = ["#5b6b7f", "#1f77b4", "#e4572e", "#2a9d8f", "#9b5de5", "#f4a261", "#3a86ff", "#8d99ae"];
  window.museCharts = [];

  var form = document.getElementById("switches");
  if (form) {
    form.addEventListener("change", function () { form.submit(); });
  }

  function data(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }
  function pct(v) { return (v > 0 ? "+" : "") + (v * 100).toPrecision(3) + " %"; }
  function colour(i, alpha) {
    var hex = PALETTE[i % PALETTE.length];
    if (alpha === undefined) { return hex; }
    var n = parseInt(hex.slice(1), 16);
    return "rgba(" + (n >> 16) + "," + ((n >> 8) & 255) + "," + (n & 255) + "," + alpha + ")";
  }
  function empty(canvas, text) {
    var box = canvas.parentNode;
    box.classList.add("no-data");
    box.setAttribute("data-empty", text);
  }
  function hasData(series) {
    return Object.keys(series || {}).some(function (k) {
      return (series[k] || []).some(function (v) { return v && (v.lift !== undefined ? v.lift !== null : v !== 0); });
    });
  }

  var builders = {
    bars: function (d, stacked) {
      return {
        type: "bar",
        data: {
          labels: d.labels,
          datasets: Object.keys(d.series).map(function (k, i) {
            return { label: k, data: d.series[k], backgroundColor: colour(i, 0.8), stack: stacked ? "s" : undefined };
          })
        },
        options: { scales: { x: { stacked: !!stacked }, y: { stacked: !!stacked, beginAtZero: true } } }
      };
    },
    stacked: function (d) { return builders.bars(d, true); },
    dist: function (d) {
      return {
        type: "line",
        data: {
          labels: d.labels,
          datasets: Object.keys(d.series).map(function (k, i) {
            return { label: k, data: d.series[k], borderColor: colour(i), backgroundColor: colour(i, 0.15),
                     fill: true, tension: 0.25, pointRadius: 0 };
          })
        },
        options: {
          scales: { y: { beginAtZero: true, ticks: { callback: function (v) { return Math.round(v * 100) + " %"; } },
                         title: { display: true, text: "share of calls" } },
                    x: { ticks: { maxRotation: 60, autoSkip: true, maxTicksLimit: 10 } } },
          plugins: { tooltip: { callbacks: { label: function (c) { return c.dataset.label + ": " + (c.parsed.y * 100).toFixed(1) + " %"; } } } }
        }
      };
    },
    lift: function (d) {
      var variants = Object.keys(d.series);
      var labels = variants.length ? d.series[variants[0]].map(function (p) { return p.t; }) : [];
      var datasets = [];
      variants.forEach(function (k, i) {
        var pts = d.series[k], c = i + 1;
        datasets.push({ label: k + " band low", data: pts.map(function (p) { return p.low; }), borderWidth: 0, pointRadius: 0, fill: false, borderColor: colour(c, 0) });
        datasets.push({ label: k + " band", data: pts.map(function (p) { return p.high; }), borderWidth: 0, pointRadius: 0, fill: "-1", backgroundColor: colour(c, 0.18), borderColor: colour(c, 0) });
        datasets.push({ label: k, data: pts.map(function (p) { return p.lift; }), borderColor: colour(c), backgroundColor: colour(c), pointRadius: 2, tension: 0.2 });
      });
      return {
        type: "line",
        data: { labels: labels, datasets: datasets },
        options: {
          scales: { y: { ticks: { callback: function (v) { return pct(v); } }, title: { display: true, text: "relative lift" } },
                    x: { ticks: { maxTicksLimit: 8 } } },
          plugins: {
            legend: { labels: { filter: function (item) { return item.text.indexOf(" band") < 0; } } },
            tooltip: { callbacks: { label: function (c) { return c.dataset.label + ": " + (c.parsed.y === null ? "—" : pct(c.parsed.y)); } } }
          }
        }
      };
    }
  };

  document.querySelectorAll("canvas[data-kind]").forEach(function (canvas) {
    var d = data(canvas.getAttribute("data-source"));
    if (!d || !hasData(d.series)) { empty(canvas, "No data in this range yet."); return; }
    var config = builders[canvas.getAttribute("data-kind")](d);
    config.options = Object.assign({ responsive: true, maintainAspectRatio: false, animation: false }, config.options);
    window.museCharts.push(new Chart(canvas, config));
  });
})();
