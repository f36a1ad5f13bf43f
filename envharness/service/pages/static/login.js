// Submit the one-time sign-in form at once (the button is there for browsers without scripts).
"use strict";
document.getElementById("login-form")?.submit();
