// Drives the Troupe dashboard in Debian's Chromium and checks what a person sees.
// Run by server/tests/browser.rs, which starts the control plane, seeds it and writes the
// batches this script posts. Prints one JSON line of results; exits non-zero on failure.
//
// Environment: TROUPE_URL, TROUPE_INGEST_TOKEN, TROUPE_BATCHES (directory of batch JSON),
// TROUPE_ARTIFACTS (screenshots), TROUPE_XSS_CLUSTER, TROUPE_XSS_NODES (JSON array),
// CHROMIUM (default /usr/bin/chromium).
import { readFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const base = process.env.TROUPE_URL;
const token = process.env.TROUPE_INGEST_TOKEN;
const batches = process.env.TROUPE_BATCHES;
const artifacts = process.env.TROUPE_ARTIFACTS;
const xssCluster = process.env.TROUPE_XSS_CLUSTER;
const xssNodes = JSON.parse(process.env.TROUPE_XSS_NODES || '[]');
const LIVE_BUDGET_MS = 1000;

const results = { latency_ms: {}, phase_ms: {}, screenshots: [], checks: [] };
const t0 = Date.now();
const phase = (name) => { results.phase_ms[name] = Date.now() - t0; };
const problems = [];
const check = (ok, what) => { results.checks.push(what); if (!ok) { problems.push(what); } };

async function post(name) {
  const body = await readFile(join(batches, name));
  const started = Date.now();
  const r = await fetch(base + '/api/v1/ingest', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + token },
    body,
  });
  if (!r.ok) { throw new Error(`ingest of ${name} failed: ${r.status} ${await r.text()}`); }
  return started;
}

async function shot(page, name, fullPage = true) {
  const path = join(artifacts, name + '.png');
  await page.screenshot({ path, fullPage });
  results.screenshots.push(path);
}

async function waitLive(page) {
  await page.waitForSelector('#live[data-state="live"]', { timeout: 10000 });
  const text = (await page.textContent('#live')).trim();
  check(text === 'live', `the indicator says "live" (it says "${text}")`);
}

// Posts `batch` and measures until `selector` (containing `text`) is visible.
async function liveUpdate(page, what, batch, selector, text) {
  const started = await post(batch);
  const locator = page.locator(selector, { hasText: text });
  await locator.first().waitFor({ state: 'visible', timeout: 10000 });
  const ms = Date.now() - started;
  results.latency_ms[what] = ms;
  check(ms <= LIVE_BUDGET_MS, `${what} shows within ${LIVE_BUDGET_MS} ms of ingest (took ${ms} ms)`);
}

await mkdir(artifacts, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-background-networking', '--disable-dev-shm-usage'],
  headless: true,
});
const dialogs = [];
const cspViolations = [];
const pageErrors = [];
try {
  const context = await browser.newContext({ viewport: { width: 1360, height: 900 } });
  const page = await context.newPage();
  page.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) { cspViolations.push(m.text()); }
  });
  phase('browser started');
  const q = '?cluster=prod';

  // Overview: a member row appears live when a node joins.
  await page.goto(base + '/ui/' + q);
  await waitLive(page);
  check(await page.locator('tr[data-member="10.0.0.1:2552"] .badge.leader').count() === 1,
        'the leader has its badge');
  check(await page.locator('tr[data-member="10.0.0.3:2552"]').count() === 0, 'the new node is not there yet');
  // The cluster map: three members (two on one machine, the third's agent reports none), the
  // leader and the singleton's host marked, the router's routees with depth bars.
  const map = '#cluster-map svg.map ';
  check(await page.locator(map + 'g.node').count() === 3, 'the map draws the three members');
  check(await page.locator(map + 'g.machine[data-machine="rack-a"][data-hosts="2"]').count() === 1,
        'the map frames both members in their machine, counted');
  check(await page.locator(map + 'g.node.leader[data-node="10.0.0.1:2552"]').count() === 1,
        'the map marks the leader');
  check(await page.locator(map + 'g.node[data-node="10.0.0.1:2552"][data-singletons="1"]').count() === 1,
        "the map marks the singleton's host");
  check(await page.locator(map + 'g.router[data-router="/user/orders"] g.routee').count() === 2,
        'the map lists the router\'s routees');
  check(await page.locator(map + 'g.routee[data-routee="10.0.0.2:2552"][data-depth="97"]').count() === 0,
        'the new depth is not there yet');
  const joined = await post('join.json');
  await page.locator(map + 'g.node[data-node="10.0.0.3:2552"]').waitFor({ state: 'visible', timeout: 10000 });
  const joinMs = Date.now() - joined;
  results.latency_ms['member joins (map)'] = joinMs;
  check(joinMs <= LIVE_BUDGET_MS, `the map shows a new member within ${LIVE_BUDGET_MS} ms of ingest (took ${joinMs} ms)`);
  await page.locator('tr[data-member="10.0.0.3:2552"]', { hasText: 'up' }).waitFor({ timeout: 10000 });
  results.latency_ms['member joins (overview)'] = Date.now() - joined;
  // A report of depth samples only: no stream event, the map's own refresh brings it.
  const sampled = await post('depth.json');
  await page.locator(map + 'g.routee[data-routee="10.0.0.2:2552"][data-depth="97"]')
    .waitFor({ state: 'attached', timeout: 10000 });
  const depthMs = Date.now() - sampled;
  results.latency_ms['routee depth (map)'] = depthMs;
  check(depthMs <= 2000 + LIVE_BUDGET_MS, `the map shows a new depth within 3 s of ingest (took ${depthMs} ms)`);
  check(await page.locator(map + 'g.routee[data-routee="10.0.0.2:2552"] rect.depth[width="90"]').count() === 1,
        'the deepest routee fills its bar');
  const utc = await page.locator('main time').first().textContent();
  check(/UTC$/.test(utc.trim()), `times say UTC (${utc})`);
  await shot(page, 'overview');

  // Singletons: a hand-over appears in the history.
  await page.goto(base + '/ui/singletons' + q);
  await waitLive(page);
  await liveUpdate(page, 'hand-over (singletons)', 'hand-over.json',
                   '[data-singleton="billing"] table.history tr', 'SingletonHandOverCompleted');
  const host = await page.locator('[data-singleton="billing"] .stat .value a').first().textContent();
  check(host.trim() === '10.0.0.3:2552', `the singleton's host is the new node (${host})`);
  await shot(page, 'singletons');

  // Dead letters: a new one appears in the table.
  await page.goto(base + '/ui/dead-letters' + q);
  await waitLive(page);
  await liveUpdate(page, 'dead letter (dead letters)', 'dead-letter.json',
                   'table.dead-letters tr', '/user/live-check');
  await shot(page, 'dead-letters');

  // The other pages, and links between them.
  await page.goto(base + '/ui/timeline' + q);
  await waitLive(page);
  check(await page.locator('svg[aria-label="member lifetimes and leadership"] rect.leader').count() > 0,
        'the timeline draws who led');
  await shot(page, 'timeline');
  await page.goto(base + '/ui/routers' + q);
  check(await page.locator('[data-router="/user/orders"] polyline').count() > 0, 'routers have depth charts');
  check(await page.locator('#routers > section').first().locator('tbody tr').count() > 0,
        'the deepest mailboxes now are listed');
  await shot(page, 'routers');
  await page.goto(base + '/ui/singletons' + q);
  await page.click('[data-singleton="billing"] .stat .value a');
  await page.waitForURL(/\/ui\/node\?/);
  check((await page.textContent('h1')).includes('10.0.0.3:2552'), "the singleton's host links to its node page");
  await waitLive(page);
  await shot(page, 'node');

  // The map without JavaScript: the server drew it.
  const noScript = await browser.newContext({ viewport: { width: 1360, height: 900 }, javaScriptEnabled: false });
  const still = await noScript.newPage();
  await still.goto(base + '/ui/' + q);
  check(await still.locator('#cluster-map svg.map g.node').count() === 4, 'the map reads without JavaScript');
  check(await still.locator('#cluster-map g.node[data-node="10.0.0.3:2552"][data-singletons="1"]').count() === 1 &&
        await still.locator('#cluster-map g.node[data-node="10.0.0.1:2552"][data-singletons="0"]').count() === 1,
        'after the hand-over the map marks the new host, not the old one');
  await shot(still, 'overview-no-script');
  // Fifty members on seventeen machines.
  await still.goto(base + '/ui/?cluster=fifty');
  check(await still.locator('#cluster-map svg.map g.node').count() === 50, 'the map draws fifty members');
  check(await still.locator('#cluster-map svg.map g.machine').count() === 17, 'on their seventeen machines');
  await shot(still, 'overview-50-nodes');
  await noScript.close();

  phase('pages checked');
  // Polling fallback when the stream is unavailable.
  const fallback = await context.newPage();
  await fallback.route('**/api/v1/events/stream**', (route) => route.abort());
  await fallback.goto(base + '/ui/' + q);
  await fallback.waitForSelector('#live[data-state="polling"]', { timeout: 10000 });
  check((await fallback.textContent('#live')).includes('polling'), 'the indicator says polling without a stream');
  const started = await post('late-join.json');
  await fallback.locator('tr[data-member="10.0.0.4:2552"]').waitFor({ timeout: 15000 });
  results.latency_ms['member joins (polling)'] = Date.now() - started;
  await shot(fallback, 'overview-polling');
  await fallback.close();

  phase('polling checked');
  // The cluster switcher goes to the same page of the other cluster.
  await page.goto(base + '/ui/routers' + q);
  await page.selectOption('#cluster-switch', xssCluster);
  await page.waitForURL((url) => url.pathname === '/ui/routers' && url.searchParams.get('cluster') === xssCluster);
  check(true, 'the cluster switcher opens the same page of the chosen cluster');

  // XSS: every page of the hostile cluster, and node pages of hostile nodes.
  const x = '?cluster=' + encodeURIComponent(xssCluster);
  const hostile = ['/ui/', '/ui/timeline', '/ui/singletons', '/ui/routers', '/ui/dead-letters', '/ui/map']
    .map((p) => base + p + x)
    .concat(xssNodes.map((n) => base + '/ui/node' + x + '&node=' + encodeURIComponent(n)))
    .concat(xssNodes.slice(0, 3).map((n) => base + '/ui/dead-letters' + x + '&q=' + encodeURIComponent(n)));
  for (const [i, url] of hostile.entries()) {
    const pageStarted = Date.now();
    await page.goto(url);
    results.phase_ms['xss page ' + i] = Date.now() - pageStarted;
    await page.waitForLoadState('load');
    await page.waitForTimeout(150);
    const flagged = await page.evaluate(() => window.__xss);
    check(flagged === undefined, `no payload ran on ${url}`);
    if (i < 5) { await shot(page, 'xss-' + ['overview', 'timeline', 'singletons', 'routers', 'dead-letters'][i], false); }
  }
  phase('xss checked');
  check(dialogs.length === 0, `no dialog opened (${dialogs.length}: ${dialogs.slice(0, 3).join(' | ')})`);
  check(cspViolations.length === 0, `no CSP violation (${cspViolations.slice(0, 3).join(' | ')})`);
  check(pageErrors.length === 0, `no script error (${pageErrors.slice(0, 3).join(' | ')})`);
} catch (e) {
  problems.push('error: ' + (e && e.stack || e));
} finally {
  await browser.close();
}
results.problems = problems;
console.log(JSON.stringify(results));
process.exit(problems.length === 0 ? 0 : 1);
