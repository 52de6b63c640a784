// Keeps a dashboard page current: subscribes to the control plane's event stream and, on each
// event of the page's cluster, re-fetches the page and swaps in its live sections. Falls back
// to polling while the stream is down, and says which it is doing in the header.
//
// Safety: this script never turns data into markup. It reads only data- attributes and sets
// only textContent; fresh sections come from the server's own escaped HTML, parsed by
// DOMParser (which runs no scripts) and moved into the page as nodes.
(function () {
  'use strict';
  var body = document.body;
  var indicator = document.getElementById('live');
  if (!indicator) { return; }
  var cluster = body.getAttribute('data-cluster') || '';
  var kinds = (body.getAttribute('data-event-kinds') || '').split(',').filter(Boolean);
  var POLL_MS = 5000;
  var REFRESH_MS = 15000;
  // At most about three refreshes a second however busy the cluster is.
  var MIN_GAP_MS = 300;
  var lastRefresh = 0;
  var source = null;
  var opened = false;
  var pollTimer = null;
  var queued = null;
  var inflight = false;
  var again = false;

  function show(state, text) {
    indicator.setAttribute('data-state', state);
    indicator.textContent = text;
  }

  function swap(text) {
    var doc = new DOMParser().parseFromString(text, 'text/html');
    var live = document.querySelectorAll('[data-live]');
    for (var i = 0; i < live.length; i++) {
      var fresh = doc.getElementById(live[i].id);
      if (fresh) { live[i].replaceWith(document.adoptNode(fresh)); }
    }
    body.setAttribute('data-refreshed', String(Date.now()));
  }

  function refresh() {
    if (document.hidden) { again = true; return; }
    if (inflight) { again = true; return; }
    inflight = true;
    lastRefresh = Date.now();
    fetch(window.location.href, { cache: 'no-store', credentials: 'same-origin',
                                  headers: { 'Accept': 'text/html' } })
      .then(function (r) {
        if (!r.ok) { throw new Error('status ' + r.status); }
        return r.text();
      })
      .then(function (text) {
        swap(text);
        if (indicator.getAttribute('data-state') === 'down') {
          if (source && source.readyState === 1) { show('live', 'live'); } else { startPolling(); }
        }
      })
      .catch(function () { if (!source || source.readyState !== 1) { show('down', 'offline'); } })
      .then(function () {
        inflight = false;
        if (again) { again = false; soon(); }
      });
  }

  function soon() {
    if (queued !== null) { return; }
    var wait = Math.max(30, lastRefresh + MIN_GAP_MS - Date.now());
    queued = setTimeout(function () { queued = null; refresh(); }, wait);
  }

  function startPolling() {
    show('polling', 'polling every ' + POLL_MS / 1000 + ' s');
    if (pollTimer === null) { pollTimer = setInterval(refresh, POLL_MS); }
  }

  function stopPolling() {
    if (pollTimer !== null) { clearInterval(pollTimer); pollTimer = null; }
  }

  function onEvent(e) {
    try {
      var data = JSON.parse(e.data);
      if (cluster && data.cluster !== cluster) { return; }
    } catch (err) { return; }
    soon();
  }

  function connect() {
    if (typeof window.EventSource !== 'function') { startPolling(); return; }
    var url = '/api/v1/events/stream' + (cluster ? '?cluster=' + encodeURIComponent(cluster) : '');
    source = new EventSource(url);
    source.addEventListener('open', function () {
      stopPolling();
      show('live', 'live');
      // Catch up on anything stored while the stream was down (or, on a page that took a
      // while to connect, since it was rendered).
      if (opened || performance.now() > 1000) { soon(); }
      opened = true;
    });
    source.addEventListener('error', function () {
      // The browser retries by itself (the server asks for 3 s); poll meanwhile.
      startPolling();
      if (source.readyState === 2) { setTimeout(connect, POLL_MS); }
    });
    for (var i = 0; i < kinds.length; i++) { source.addEventListener(kinds[i], onEvent); }
  }

  // The cluster map (overview) also shows mailbox depths and silent agents, which change
  // without a stream event: its fragment (data-src, the server's own /ui/map link) is fetched
  // again every MAP_MS while the tab shows, and swapped in like a live section.
  var MAP_MS = 2000;
  var mapBusy = false;

  function refreshMap() {
    var current = document.getElementById('cluster-map');
    if (!current || document.hidden || mapBusy || inflight) { return; }
    var src = current.getAttribute('data-src');
    if (!src || src.indexOf('/ui/map?') !== 0) { return; }
    mapBusy = true;
    fetch(src, { cache: 'no-store', credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
      .then(function (r) {
        if (!r.ok) { throw new Error('status ' + r.status); }
        return r.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, 'text/html').getElementById('cluster-map');
        var shown = document.getElementById('cluster-map');
        if (fresh && shown) {
          shown.replaceWith(document.adoptNode(fresh));
          body.setAttribute('data-map-refreshed', String(Date.now()));
        }
      })
      .catch(function () {})
      .then(function () { mapBusy = false; });
  }

  // Hidden tabs skip refreshes and catch up when shown again.
  document.addEventListener('visibilitychange', function () {
    if (!document.hidden && again) { again = false; soon(); }
  });

  // The cluster switcher submits on change.
  var switcher = document.querySelector('select[data-autosubmit]');
  if (switcher && switcher.form) {
    switcher.addEventListener('change', function () { switcher.form.submit(); });
  }

  show('connecting', 'connecting…');
  connect();
  setInterval(refresh, REFRESH_MS);
  if (document.getElementById('cluster-map')) { setInterval(refreshMap, MAP_MS); }
})();
