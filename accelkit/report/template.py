"""The report's Jinja2 template, kept in Python so that it ships with the package without package-data
configuration. Everything is inline (styles, plotly.js, figure data): the file needs no network."""

TEMPLATE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>accelkit report</title>
<style>
  body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1280px;
         padding: 16px 24px; color: #1d1d1f; }
  h1 { font-size: 1.5rem; margin-bottom: 0.2rem; }
  h2 { font-size: 1.15rem; margin: 1.6rem 0 0.2rem; border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; }
  p.caption, p.meta { color: #555; margin: 0.2rem 0 0.6rem; font-size: 0.9rem; }
  .filters { display: flex; gap: 12px; margin: 0.6rem 0; align-items: center; font-size: 0.9rem; }
  .filters input, .filters select { padding: 4px 6px; font-size: 0.9rem; }
  .scroll { overflow-x: auto; max-height: 420px; overflow-y: auto; border: 1px solid #e4e4e4; }
  table { border-collapse: collapse; font-size: 0.82rem; width: 100%; }
  th, td { padding: 4px 8px; border-bottom: 1px solid #eee; text-align: left; white-space: nowrap; }
  th { background: #f6f6f6; position: sticky; top: 0; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  .plot { width: 100%; min-height: 380px; }
  ul.verdicts { font-size: 0.9rem; }
</style>
</head>
<body>
<h1>accelkit report</h1>
<p class="meta">{% if rows|length + unreadable < bench_total %}the newest {{ rows|length }} of {{ bench_total }} benchmark results
(<code>accelkit report --limit {{ bench_total }}</code> lists all){% elif unreadable %}{{ rows|length }} of
{{ bench_total }} benchmark results{% else %}{{ rows|length }} benchmark results{% endif %}
{%- if unreadable %} ({{ unreadable }} could not be read: see the warnings <code>accelkit report</code> printed){% endif %}
{%- if run_id %} of run {{ run_id }}{% endif %} · {{ total }} results
in <code>{{ store_path }}</code> · figures drawn from the newest 60 · sections without data are left out ·
self-contained (plotly.js inlined)</p>
{% for note in notes %}<p class="meta">note: {{ note }}</p>
{% endfor %}

<h2 id="runs">Runs</h2>
<div class="filters">
  <label>filter <input id="filter-text" type="search" placeholder="workload, variant, run …"></label>
  <label>hardware <select id="filter-hardware"><option value="">all</option>
  {% for h in hardware %}<option value="{{ h }}">{{ h }}</option>{% endfor %}</select></label>
  <span id="filter-count"></span>
</div>
<div class="scroll">
<table id="runs-table">
<thead><tr><th>id</th><th>created (UTC)</th><th>run</th><th>hardware</th><th>workload</th><th>variant</th><th>step</th>
<th>throughput</th><th>p50</th><th>CV</th><th>MFU</th><th>peak mem</th><th>J/item</th><th>drift vs fp32</th>
<th>meas/pred</th></tr></thead>
<tbody>
{% for r in rows %}<tr data-hardware="{{ r.hardware }}">
<td class="num">{{ r.id }}</td><td>{{ r.created }}</td><td>{{ r.run }}</td><td>{{ r.hardware }}</td><td>{{ r.workload }}</td>
<td>{{ r.variant }}</td><td>{{ r.step }}</td><td class="num">{{ r.throughput }}</td><td class="num">{{ r.p50 }}</td>
<td class="num">{{ r.cv }}</td><td class="num">{{ r.mfu }}</td><td class="num">{{ r.memory }}</td>
<td class="num">{{ r.energy }}</td><td>{{ r.drift }}</td><td class="num" title="{{ r.predicted_title }}">{{ r.predicted }}</td></tr>
{% else %}<tr><td colspan="15">No benchmark results{% if run_id %} in run {{ run_id }}{% else %} yet{% endif %}
{%- if contents %} — {% if run_id %}the run has{% else %}the store has{% endif %} {{ contents }} (<code>accelkit results
list</code>){% endif %}: <code>accelkit bench --suite quick</code> makes some.</td></tr>
{% endfor %}
</tbody>
</table>
</div>

{% if verdicts %}
<h2 id="verdicts">What won each run</h2>
<p class="caption">Per run with two or more variants: the fastest against the first (the baseline), with the
interleaved ratio and its p25–p75, MFU, and for training the loss after the first steps on the same batch. Separate
benches that share a run id (a sweep's points) are compared by their throughputs' ratio, which has no spread.</p>
<ul class="verdicts">
{% for v in verdicts %}<li><b>{{ v.label }}</b> on {{ v.hardware }} (run {{ v.run }}):
<ul>{% for line in v.lines %}<li>{{ line }}</li>{% endfor %}</ul></li>
{% endfor %}
</ul>
{% endif %}

{% for f in figures %}
<h2 id="h-{{ f.id }}">{{ f.title }}</h2>
<p class="caption">{{ f.caption }}</p>
<div class="plot" id="plot-{{ f.id }}" data-plot="{{ f.id }}"></div>
{% endfor %}

<script>{{ plotly_js|safe }}</script>
<script>
(function () {
  var figures = {
  {% for f in figures %}"{{ f.id }}": {{ f.json|safe }}{% if not loop.last %},{% endif %}
  {% endfor %}};
  window.accelkitPlotsRendered = 0;
  window.accelkitPlotsExpected = Object.keys(figures).length;
  Object.keys(figures).forEach(function (id) {
    var fig = figures[id];
    Plotly.newPlot("plot-" + id, fig.data, fig.layout, {responsive: true, displaylogo: false})
      .then(function () { window.accelkitPlotsRendered += 1; });
  });

  var text = document.getElementById("filter-text");
  var hw = document.getElementById("filter-hardware");
  var count = document.getElementById("filter-count");
  function applyFilters() {
    var needle = text.value.toLowerCase(), want = hw.value, shown = 0;
    var rows = document.querySelectorAll("#runs-table tbody tr[data-hardware]");
    rows.forEach(function (row) {
      var ok = (!want || row.dataset.hardware === want) && row.textContent.toLowerCase().indexOf(needle) >= 0;
      row.style.display = ok ? "" : "none";
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " shown";
  }
  text.addEventListener("input", applyFilters);
  hw.addEventListener("change", applyFilters);
  applyFilters();
})();
</script>
</body>
</html>
"""
