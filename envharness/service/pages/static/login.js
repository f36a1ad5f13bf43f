// Submit the one-time sign-in form at once (the button is there for browsers without scripts).
// `serve --open` brings the code as #code=… instead of ?code=…: a fragment is never sent, so
// it is in no request line and no log; it is read here and posted like the form's own.
"use strict";
const form = document.getElementById("login-form");
if (form) {
  const code = form.elements.namedItem("code");
  const fromFragment = new URLSearchParams(location.hash.slice(1)).get("code");
  if (fromFragment) code.value = fromFragment;
  history.replaceState(null, "", "/login"); // the code stays out of the browser's history
  if (code.value) form.submit();
}
