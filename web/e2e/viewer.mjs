// The viewer credential as a person meets it in Debian's Chromium: with --viewer-token set,
// the dashboard and its live stream are refused without the token and work with it, given
// the way a browser gives it (HTTP Basic, the token as the password, after the server's
// challenge). Run by server/tests/browser.rs, which starts the server with a viewer token.
// Prints one JSON line of results; exits non-zero on failure.
//
// Environment: TROUPE_URL, TROUPE_INGEST_TOKEN, TROUPE_VIEWER_TOKEN, TROUPE_BATCH (a batch
// file whose member 10.0.0.9:2552 joins cluster `guarded`), CHROMIUM (default
// /usr/bin/chromium).
import { readFile } from 'node:fs/promises';
import { chromium } from 'playwright-core';

const base = process.env.TROUPE_URL;
const ingestToken = process.env.TROUPE_INGEST_TOKEN;
const viewerToken = process.env.TROUPE_VIEWER_TOKEN;
const batch = process.env.TROUPE_BATCH;

const results = { checks: [], statuses: {} };
const problems = [];
const check = (ok, what) => { results.checks.push(what); if (!ok) { problems.push(what); } };
let step = 'start';
const finish = (code) => { results.problems = problems; console.log(JSON.stringify(results)); process.exit(code); };
// Bounded by itself, so a hang is reported with the step it hung in.
setTimeout(() => { problems.push('timed out in step: ' + step); finish(1); }, 45000).unref();

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-background-networking', '--disable-dev-shm-usage'],
  headless: true,
});
try {
  const q = '?cluster=guarded';

  // Without the credential: the page is refused with a Basic challenge (Chromium, having no
  // credential to answer it with, gives up the navigation), and the stream is refused to a
  // script of the server's origin (on the API docs page, which is open to all).
  const refusedWith = async (context) => {
    const page = await context.newPage();
    const answers = [];
    page.on('response', (r) => { if (r.url().includes('/ui/')) { answers.push(r); } });
    let error = '';
    try { await page.goto(base + '/ui/' + q); } catch (e) { error = String(e.message || e).split('\n')[0]; }
    const first = answers[0];
    const status = first ? first.status() : 0;
    const challenge = first ? (await first.headerValue('www-authenticate')) || '' : '';
    await page.waitForLoadState('load').catch(() => {});
    const shows = (await page.content().catch(() => '')).includes('10.0.0.8:2552');
    return { page, status, challenge, error, shows };
  };
  step = 'anonymous page';
  const anonymous = await browser.newContext();
  const none = await refusedWith(anonymous);
  results.statuses.anonymous_page = none.status;
  results.anonymous_navigation = none.error || 'loaded';
  check(none.status === 401, `the dashboard is 401 without the credential (${none.status})`);
  check(/^Basic /.test(none.challenge), `the 401 challenges for Basic first (${none.challenge})`);
  check(!none.shows, 'nothing of the cluster is shown without the credential');
  step = 'anonymous stream';
  // A page of its own: the refused one may still be moving to Chromium's error page.
  const open = await anonymous.newPage();
  const docs = await open.goto(base + '/api/v1/docs');
  check(docs.status() === 200, `the API docs page is open (${docs.status()})`);
  // `credentials: 'omit'`: a request with nothing to prove (Chromium would otherwise hold it
  // waiting for a sign-in that headless never gives).
  const stream = await open.evaluate(async (url) => {
    const timeout = new Promise((resolve) => setTimeout(() => resolve('no answer within 5 s'), 5000));
    const answer = fetch(url, { credentials: 'omit' }).then((r) => r.status, (e) => 'refused: ' + e);
    return Promise.race([answer, timeout]);
  }, base + '/api/v1/events/stream' + q);
  results.statuses.anonymous_stream = stream;
  check(stream === 401, `the live stream is 401 to the page's script without the credential (${stream})`);
  await anonymous.close();

  // A wrong token as the password: refused too.
  step = 'wrong token';
  const wrong = await browser.newContext({ httpCredentials: { username: 'operator', password: viewerToken + 'x' } });
  const bad = await refusedWith(wrong);
  results.statuses.wrong_page = bad.status;
  check(bad.status === 401, `the dashboard is 401 with a wrong token (${bad.status})`);
  check(!bad.shows, 'nothing of the cluster is shown with a wrong token');
  await wrong.close();

  // With the token as the Basic password: the page, its live indicator, and a member that
  // joins while the page is open.
  step = 'viewer page';
  const viewer = await browser.newContext({ httpCredentials: { username: 'operator', password: viewerToken } });
  const seen = await viewer.newPage();
  const shown = await seen.goto(base + '/ui/' + q);
  results.statuses.viewer_page = shown.status();
  check(shown.status() === 200, `the dashboard is 200 with the credential (${shown.status()})`);
  check(await seen.locator('tr[data-member="10.0.0.8:2552"]').count() === 1, 'the seeded member is shown');
  await seen.waitForSelector('#live[data-state="live"]', { timeout: 10000 });
  check((await seen.textContent('#live')).trim() === 'live', 'the live stream is connected with the credential');
  step = 'live join';
  const started = Date.now();
  const r = await fetch(base + '/api/v1/ingest', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + ingestToken },
    body: await readFile(batch),
  });
  check(r.ok, `the live batch is stored (${r.status})`);
  await seen.locator('tr[data-member="10.0.0.9:2552"]').first().waitFor({ state: 'visible', timeout: 10000 });
  results.live_ms = Date.now() - started;
  check(true, 'a member that joins shows up live with the credential');
  step = 'viewer stream';
  const streamStatus = await seen.evaluate(async (url) => {
    const controller = new AbortController();
    const timeout = new Promise((resolve) => setTimeout(() => resolve('no answer within 5 s'), 5000));
    const answer = fetch(url, { signal: controller.signal }).then((r) => r.status, (e) => 'refused: ' + e);
    const status = await Promise.race([answer, timeout]);
    controller.abort();
    return status;
  }, base + '/api/v1/events/stream' + q);
  results.statuses.viewer_stream = streamStatus;
  check(streamStatus === 200, `the live stream is 200 to the page's script with the credential (${streamStatus})`);
  await viewer.close();
} catch (e) {
  problems.push('error: ' + (e && e.stack || e));
} finally {
  await browser.close();
}
finish(problems.length === 0 ? 0 : 1);
