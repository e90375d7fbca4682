// Pre-rendered explorers (posenc_ref.widgets.frame_slider): each <figure data-frame-slider> holds one <img>
// per value of a control and an <input type="range">; the input's value is the index of the frame to show.
(() => {
  "use strict";

  function connect(explorer) {
    const slider = explorer.querySelector("input[type=range]");
    const frames = Array.from(explorer.querySelectorAll(".frame-slider-frames img"));
    const readout = explorer.querySelector("output");
    if (!slider || frames.length === 0) return;
    const show = () => {
      const index = Math.min(Math.max(Number(slider.value) || 0, 0), frames.length - 1);
      frames.forEach((frame, position) => { frame.hidden = position !== index; });
      if (readout) readout.textContent = frames[index].dataset.label || "";
    };
    slider.addEventListener("input", show);
    slider.addEventListener("change", show);
    show();  // a browser may restore the slider's position when the page is reloaded
  }

  function connectAll() {
    document.querySelectorAll("[data-frame-slider]").forEach(connect);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", connectAll);
  } else {
    connectAll();
  }
})();
