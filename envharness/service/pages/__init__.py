"""The browser viewer: server-rendered pages, a little plain JavaScript, no build step.

Destinations and pages (each module's table is listed in
:data:`envharness.service.app.ENDPOINTS`):

- :mod:`.store` — Overview, Sessions, Verify, and the page shown for an error;
- :mod:`.experiments` — the Experiments destination and one experiment;
- :mod:`.sessions` — a session's Overview, Configuration and record pages;
- :mod:`.turns` — a session's Turns: the turn grid, a window at a time;
- :mod:`.progression` — a session's Progression: its signals plotted over turns;
- :mod:`.compare` — two sessions side by side;
- :mod:`.trajectories` — the Trajectories destination, a trajectory, a session's Trajectory tab;
- :mod:`.snapshots` — snapshots, datasets and imported sources' health;
- :mod:`.optimizer` — the Harnesses destination: harness versions, optimizer runs, diffs;
- :mod:`.login` — signing the browser in with the one-time link, and out;
- :mod:`.reference` — ``/docs``, the interactive API reference;
- :mod:`.assets` — the files of ``static/`` (stylesheet, scripts, icon), served from memory.

Drawing pieces they share:

- :mod:`.html` — escaped-by-default markup, the only way the viewer builds HTML;
- :mod:`.layout` — the frame of every page: head, navigation, who is signed in, footer;
- :mod:`.widgets` — heads, tabs, chips, pagers and tables drawn alike everywhere;
- :mod:`.render` — records as markup: the turn grid and one-line descriptions;
- :mod:`.text_view` — an environment's text view, its ANSI colours as classes;
- :mod:`.artifact_view` — previews of a turn's artifacts (images, the start of a text);
- :mod:`.plot` — a line chart as inline SVG;
- :mod:`.session_view` — what every page of one session shares: summary, header, tabs;
- :mod:`.config_view` — a frozen configuration's settings and operations;
- :mod:`.lineage_view` — a session's parent and branches, with compare links;
- :mod:`.trajectory_view` — a trajectory's states, segments, binding, reward and provenance;
- :mod:`.optimizer_view` — patch code, diffs, figures, verdicts and measurements.

Pages read through :mod:`envharness.service.access` — the caller's policy is applied in the
query, never in a template — and reuse the JSON API's reads (:mod:`envharness.service.http`),
so a page shows exactly what the API answers; the API never imports a page.
"""
