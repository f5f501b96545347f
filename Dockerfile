# The sw4rm binary: one image for `sw4rm server`, `sw4rm worker` and `sw4rm dev`.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/sw4rm ./cmd/sw4rm

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sw4rm /usr/local/bin/sw4rm
EXPOSE 50051 8080
ENTRYPOINT ["/usr/local/bin/sw4rm"]
CMD ["server"]
