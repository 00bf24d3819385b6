// Charts of sparse per-minute series (traffic, latency, lag): a value is drawn only where
// there is a sample (null is a gap, never a zero), a lone sample is a dot rather than an
// invisible line end, and a chart with no sample at all is replaced by a sentence saying why.
(function () {
  function isolated(ctx) {
    const data = ctx.dataset.data;
    const i = ctx.dataIndex;
    if (data[i] === null || data[i] === undefined) return false;
    const before = i > 0 ? data[i - 1] : null;
    const after = i + 1 < data.length ? data[i + 1] : null;
    return before === null || before === undefined || after === null || after === undefined;
  }

  function dataset(s) {
    return {
      label: s.label, data: s.data, borderColor: s.color, backgroundColor: s.color,
      borderWidth: 2, tension: 0.2, spanGaps: false,
      pointRadius: (ctx) => (isolated(ctx) ? 3 : 0),
      pointHoverRadius: 4,
    };
  }

  function hasSamples(sets) {
    return sets.some((s) => s.data.some((v) => v !== null && v !== undefined));
  }

  // Draw (or update) the chart on canvas `id`; show `empty` (text) instead when no set
  // has a sample. Returns the Chart.
  function draw(charts, id, labels, sets, empty) {
    const canvas = document.getElementById(id);
    const box = canvas.parentElement;
    let note = box.querySelector(".chart-empty");
    if (!note) {
      note = document.createElement("p");
      note.className = "chart-empty muted";
      note.setAttribute("role", "status");
      box.appendChild(note);
    }
    const none = !hasSamples(sets);
    note.textContent = none ? empty : "";
    note.hidden = !none;
    canvas.style.visibility = none ? "hidden" : "visible";
    box.dataset.samples = none ? "0" : "1";
    if (charts[id]) {
      charts[id].data.labels = labels;
      sets.forEach((s, i) => { charts[id].data.datasets[i].data = s.data; });
      charts[id].update("none");
      return charts[id];
    }
    charts[id] = new Chart(canvas, {
      type: "line",
      data: { labels: labels, datasets: sets.map(dataset) },
      options: { animation: false, maintainAspectRatio: false, interaction: { mode: "index", intersect: false }, scales: { y: { beginAtZero: true } } },
    });
    return charts[id];
  }

  window.mqcloudCharts = { draw: draw };
})();
