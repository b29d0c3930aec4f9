// The dashboard's sign-in form, the signed-in principal in the header, and signing out (app.js calls
// these: signIn when the API answers 401, showWho on the first page). Served as it is, before app.js.
"use strict";

function signIn(reason) {
  if (active) clearInterval(active.timer);
  active = null;
  document.getElementById("who").innerHTML = "";
  view.innerHTML = `<h1>Sign in</h1>
    <p class="muted">With an API token (the first start wrote the admin's to <span class="mono">&lt;data-dir&gt;/admin.token</span>),
    or a user's name and password.</p>
    <form id="sign-in" class="login">
      <label>Token <input name="token" type="password" autocomplete="off" placeholder="lw_…"></label>
      <p class="muted">or</p>
      <label>Name <input name="name" autocomplete="username"></label>
      <label>Password <input name="password" type="password" autocomplete="current-password"></label>
      <button type="submit">Sign in</button>
      <span class="error" id="sign-in-error"></span>
    </form>`;
  const form = view.querySelector("#sign-in");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = Object.fromEntries(new FormData(form));
    const body = data.token ? {token: data.token} : {name: data.name, password: data.password};
    try {
      await api("/session", {method: "POST", body});
      route();
    } catch (e) { form.querySelector("#sign-in-error").textContent = e.message; }
  });
}

async function showWho() {
  try {
    const me = await api("/session");
    document.getElementById("who").innerHTML =
      `<span id="signed-in">${esc(me.name)} (${esc(me.role || "no role")})</span> <button id="sign-out" class="secondary">Sign out</button>`;
    document.body.classList.toggle("viewer", me.role === "viewer");
    document.getElementById("sign-out").addEventListener("click", async () => {
      await api("/session", {method: "DELETE"}).catch(() => null);
      signIn();
    });
  } catch (e) { /* not signed in: the page shows the form */ }
}
