#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
package import SystemPackage
import SignetCore

import SignetNetwork

/// What a transport found at a URL: the bytes, or nothing there (HTTP 403/404, no such file:
/// the end of the root chain).
package enum TUFAnswer {
    case found([UInt8])
    case absent(status: Int)
}

/// Where a TUF client's files come from: one seam, with ``TUFHTTPSTransport`` (HTTPS through
/// the network layer, under Signet's TLS policy) and ``TUFLocalFolder`` (a copy of a repository
/// on local media) as its conformers, and the tests' in-memory repository. The client's checks
/// are the same whatever the transport: every file is bounded by the length the workflow
/// allows, and verified before it is trusted or stored. A transport throws Signet's own error
/// kinds (`.network`, `.downloadTooLarge`, `.tlsPolicy`, …).
package protocol TUFTransport: AnyObject {
    /// The file at `url` in memory, at most `limit` bytes, or `.absent`.
    func get(_ url: String, limit: Int, what: String) throws -> TUFAnswer
    /// The file at `url` written into the open file `fd`, at most `limit` bytes; the bytes
    /// written.
    func download(_ url: String, into fd: FileDescriptor, path: String, limit: Int64, what: String) throws -> Int64
    /// Requests made and body bytes received, for reports.
    var requests: Int { get }
    var bytesReceived: UInt64 { get }
}

/// HTTPS: one bounded fetcher (one connection) for the client's life.
final class TUFHTTPSTransport: TUFTransport {
    private let fetcher: BoundedFetcher

    init(options: DownloadOptions, cancelled: CancellationFlag?) {
        fetcher = BoundedFetcher(options: options, cancelled: cancelled)
    }

    func get(_ url: String, limit: Int, what: String) throws -> TUFAnswer {
        switch try fetcher.get(url, limit: limit, what: what) {
        case .found(let bytes): return .found(bytes)
        case .absent(let status): return .absent(status: status)
        }
    }

    func download(_ url: String, into fd: FileDescriptor, path: String, limit: Int64, what: String) throws -> Int64 {
        try fetcher.download(url, into: fd, path: path, limit: limit, what: what)
    }

    var requests: Int { fetcher.requests }
    var bytesReceived: UInt64 { fetcher.bytesReceived }
}

/// A repository copied to a folder — a USB stick, a mounted image (`update --repository
/// /media/stick/app/metadata/` or `file:///…`): its `metadata/` and `targets/` read as the
/// server's would be, each file bounded as a response is, never through a symbolic link at its
/// last component nor from anything but a regular file. The media conveys no trust: what it
/// holds is verified exactly as a download is (FORMAT.md §7, "Updates from local media").
package final class TUFLocalFolder: TUFTransport {
    package init() {}
    package private(set) var requests = 0
    package private(set) var bytesReceived: UInt64 = 0

    /// The local path a repository location names: `/abs/path/` or `file:///abs/path/`; nil
    /// for anything else (an `https://` URL).
    package static func path(of location: String) -> String? {
        if location.hasPrefix("/") { return location }
        guard location.lowercased().hasPrefix("file://") else { return nil }
        let rest = String(location.dropFirst("file://".count))
        // file:///path (empty host) or file://localhost/path; the rest percent-decoded.
        let path = rest.hasPrefix("/") ? rest : rest.lowercased().hasPrefix("localhost/") ? String(rest.dropFirst("localhost".count)) : nil
        return path.flatMap { $0.removingPercentEncoding }
    }

    package func get(_ url: String, limit: Int, what: String) throws -> TUFAnswer {
        guard let path = Self.path(of: url) else { throw SignetError(.usage, "'\(url)' is not a local path") }
        requests += 1
        guard let file = try open(path, what: what) else { return .absent(status: 404) }
        let bytes: [UInt8]
        do {
            bytes = try file.readAll(limit: limit, what: what)
        } catch let error as SignetError where error.code == .malformedInput || error.code == .downloadTooLarge {
            throw SignetError(.downloadTooLarge, "\(what) at '\(path)' is larger than the \(limit) bytes the TUF workflow allows for it: refused", path: path)
        }
        bytesReceived &+= UInt64(bytes.count)
        return .found(bytes)
    }

    package func download(_ url: String, into fd: FileDescriptor, path destination: String, limit: Int64, what: String) throws -> Int64 {
        guard let path = Self.path(of: url) else { throw SignetError(.usage, "'\(url)' is not a local path") }
        requests += 1
        guard let file = try open(path, what: what) else {
            throw SignetError(.network, "the copy of the repository has no \(what) ('\(path)')", path: path)
        }
        var written: Int64 = 0
        try file.forEachChunk { chunk in
            guard written + Int64(chunk.count) <= limit else {
                throw SignetError(.downloadTooLarge, "\(what) at '\(path)' is larger than the \(limit) bytes its targets role states: refused", path: path)
            }
            do {
                _ = try fd.writeAll(chunk)
            } catch {
                throw SignetError.posix(error, "cannot write \(what)", path: destination)
            }
            written += Int64(chunk.count)
            bytesReceived &+= UInt64(chunk.count)
        }
        return written
    }

    /// `path` opened for reading (nil: nothing there). A link at its last component, or
    /// anything but a regular file, is refused.
    private func open(_ path: String, what: String) throws -> InputFile? {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT || errno == ENOTDIR { return nil }
            throw SignetError.posix(SystemCallFailure("lstat", code: errno), "cannot read \(what) from the copy of the repository", path: path)
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw SignetError(.malformedInput, "\(what) at '\(path)' is not a regular file (a link or a device on the media): refused", path: path)
        }
        return try InputFile.open(path, what: what, followSymlinks: false)
    }
}
