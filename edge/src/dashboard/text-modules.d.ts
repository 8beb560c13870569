/** Files imported as text (wrangler.toml [[rules]] type "Text"): their default export is the file's content. */
declare module '*.html' {
  const text: string
  export default text
}
declare module '*.css' {
  const text: string
  export default text
}
declare module '*/page/dashboard.js' {
  const text: string
  export default text
}
declare module 'uplot/dist/uPlot.iife.min.js' {
  const text: string
  export default text
}
