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
  /* A signed percentage, 3 significant digits, thousands separators, never scientific notation. */
  function pct(v) {
    var text = Math.abs(v * 100).toLocaleString("en-US", { maximumSignificantDigits: 3 });
    return (v > 0 ? "+" : v < 0 ? "\u2212" : "") + text + " %";
  }
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

  function barsConfig(d, stacked) {
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
  }
  /* A tick step (ms) of whole hours or days giving at most 6 ticks over ``span`` ms; ticks fall on
     multiples of it since the epoch (whole UTC hours and days). */
  function timeStep(span) {
    var hour = 3600 * 1000, steps = [1, 2, 3, 6, 12, 24, 48, 168, 336, 720];
    for (var i = 0; i < steps.length; i++) { if (span / (steps[i] * hour) <= 6) { return steps[i] * hour; } }
    return Math.ceil(span / (6 * 720 * hour)) * 720 * hour;
  }
  function timeTicks(min, max) {
    var step = timeStep(max - min), ticks = [];
    for (var v = Math.ceil(min / step) * step; v <= max; v += step) { ticks.push({ value: v }); }
    return ticks;
  }
  function finite(v) { return typeof v === "number" && isFinite(v); }

  var builders = {
    bars: function (d) { return barsConfig(d, false); },
    stacked: function (d) { return barsConfig(d, true); },
    /* A histogram: one bar per bin (the labels are the bins' ranges), variants side by side. */
    dist: function (d) {
      return {
        type: "bar",
        data: {
          labels: d.labels,
          datasets: Object.keys(d.series).map(function (k, i) {
            return { label: k, data: d.series[k], backgroundColor: colour(i, 0.75), borderColor: colour(i),
                     borderWidth: 1, categoryPercentage: 0.85, barPercentage: 0.95 };
          })
        },
        options: {
          scales: { y: { beginAtZero: true, ticks: { callback: function (v) { return Math.round(v * 100) + " %"; } },
                         title: { display: true, text: "share of calls" } },
                    x: { ticks: { maxRotation: 45, autoSkip: true, maxTicksLimit: 8 } } },
          plugins: { tooltip: { callbacks: { label: function (c) { return c.dataset.label + ": " + (c.parsed.y * 100).toFixed(1) + " %"; } } } }
        }
      };
    },
    /* One treatment's cumulative lift on a time axis (ms since the epoch, ticks in the reporting
       zone), with its interval as a band and as a bar at each snapshot (visible from the first
       snapshot on). Every panel shares the same x and y ranges, computed from all treatments. */
    lift: function (d, canvas) {
      var variants = Object.keys(d.series);
      var k = canvas.getAttribute("data-variant") || variants[0];
      var c = Math.max(variants.indexOf(k), 0) + 1;
      var pts = d.series[k] || [];
      var ys = [0], xs = [];
      variants.forEach(function (v) {
        d.series[v].forEach(function (p) {
          xs.push(p.x);
          [p.low, p.high, p.lift].forEach(function (y) { if (finite(y)) { ys.push(y); } });
        });
      });
      var ymin = Math.min.apply(null, ys), ymax = Math.max.apply(null, ys);
      var ypad = (ymax - ymin) * 0.08 || 0.05;
      var xmin = Math.min.apply(null, xs), xmax = Math.max.apply(null, xs);
      var xpad = Math.max((xmax - xmin) * 0.04, 3600 * 1000);
      var when = new Intl.DateTimeFormat("en-GB", { timeZone: d.zone, month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hour12: false });
      function xy(field) { return pts.map(function (p) { return { x: p.x, y: p[field] }; }); }
      return {
        type: "line",
        data: {
          datasets: [
            { label: "band low", data: xy("low"), borderWidth: 0, pointRadius: 0, fill: false, borderColor: colour(c, 0) },
            { label: "band", data: xy("high"), borderWidth: 0, pointRadius: 0, fill: "-1", backgroundColor: colour(c, 0.14), borderColor: colour(c, 0) },
            { type: "bar", label: "interval", data: pts.map(function (p) { return { x: p.x, y: [p.low, p.high] }; }),
              backgroundColor: colour(c, 0.35), borderColor: colour(c), borderWidth: 1, barThickness: 6 },
            { label: k, data: xy("lift"), borderColor: colour(c), backgroundColor: colour(c), pointRadius: 3, tension: 0 }
          ]
        },
        options: {
          parsing: { xAxisKey: "x", yAxisKey: "y" },
          scales: {
            x: { type: "linear", min: xmin - xpad, max: xmax + xpad, offset: false,
                 afterBuildTicks: function (axis) { axis.ticks = timeTicks(axis.min, axis.max); },
                 ticks: { maxRotation: 0, callback: function (v) { return when.format(new Date(v)); } },
                 title: { display: true, text: "snapshot time (" + d.zone + ")" } },
            y: { min: ymin - ypad, max: ymax + ypad, ticks: { includeBounds: false, callback: function (v) { return pct(v); } },
                 title: { display: true, text: "relative lift" } }
          },
          plugins: {
            legend: { display: false },
            tooltip: {
              filter: function (item) { return item.datasetIndex === 3; },
              callbacks: {
                title: function (items) { return items.length ? when.format(new Date(items[0].parsed.x)) : ""; },
                label: function (item) {
                  var p = pts[item.dataIndex];
                  return k + ": " + (finite(p.lift) ? pct(p.lift) : "—") + (finite(p.low) && finite(p.high) ? " [" + pct(p.low) + ", " + pct(p.high) + "]" : "") + " · " + p.units + " units";
                }
              }
            }
          }
        }
      };
    }
  };

  document.querySelectorAll("canvas[data-kind]").forEach(function (canvas) {
    var d = data(canvas.getAttribute("data-source"));
    if (!d || !hasData(d.series)) { empty(canvas, "No data in this range yet."); return; }
    var config = builders[canvas.getAttribute("data-kind")](d, canvas);
    config.options = Object.assign({ responsive: true, maintainAspectRatio: false, animation: false }, config.options);
    window.museCharts.push(new Chart(canvas, config));
  });
})();
