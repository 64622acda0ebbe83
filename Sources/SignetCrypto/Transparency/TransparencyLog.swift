#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore

/// A log kept as the static files of c2sp.org/tlog-tiles in a folder: `checkpoint` (the signed
/// note), `tile/L/N[.p/W]` (hashes) and `tile/entries/N[.p/W]` (the entries, each a big-endian
/// 16-bit length and its bytes). What a static HTTPS server or CDN publishes as it is.
///
/// Appending writes the new tiles first (a path's bytes never change once a tile is full; a
/// partial tile is a new path), then ``publish(checkpoint:)`` replaces `checkpoint`: a reader
/// sees the old log or the new, whole.
public struct TransparencyLog: Sendable {
    /// The log's folder.
    public let path: String
    /// The log's key, whose name is its origin.
    public let key: NoteVerifierKey
    /// The tree of every entry appended so far (published or not).
    public private(set) var tree: TileTree
    /// The published checkpoint, as signed.
    public private(set) var checkpoint: Checkpoint
    public private(set) var checkpointNote: [UInt8]

    /// Largest entry a bundle can hold.
    public static let largestEntry = Int(UInt16.max)

    /// Makes the log folder `path` with the empty log's checkpoint signed by `key`.
    public static func create(at path: String, key: NoteSignerKey) throws -> TransparencyLog {
        if FileManager.default.fileExists(atPath: path + "/checkpoint") {
            throw SignetError(.fileExists, "'\(path)' already holds a log (its checkpoint): append to it instead", path: path)
        }
        try makeFolders(path + "/tile")
        let empty = try Checkpoint(origin: key.verifier.name, size: 0, rootHash: TileTree().rootHash())
        try AtomicFile.write(try SignedNote.sign(empty.text, by: [key]), to: path + "/checkpoint", mode: 0o644, replace: false)
        return try TransparencyLog(at: path, key: key.verifier)
    }

    /// Opens the log at `path`: its checkpoint signed by `key`, and its tiles, whose hashes must
    /// give the checkpoint's root hash (a folder changed by hand is refused, not extended).
    public init(at path: String, key: NoteVerifierKey) throws {
        self.path = path
        self.key = key
        let note = try Self.read(path + "/checkpoint", limit: SignedNote.largestNote, what: "the log's checkpoint")
        let opened = try SignedNote.open(note, known: [key])
        let checkpoint = try Checkpoint(text: opened.text)
        guard checkpoint.origin == key.name else {
            throw SignetError(.malformedInput, "the log at '\(path)' is '\(checkpoint.origin)', not '\(key.name)'", path: path)
        }
        guard checkpoint.size <= UInt64(Int32.max) else { throw SignetError(.malformedInput, "the log's size \(checkpoint.size) is beyond what Signet keeps") }
        var tree = TileTree()
        let size = Int(checkpoint.size)
        var index = 0
        while index * TileTree.width < size {
            let width = min(TileTree.width, size - index * TileTree.width)
            let tile = try Self.read(path + "/" + TileTree.path(level: 0, index: index, width: width), limit: TileTree.width * 32, what: "a tile")
            guard tile.count == width * 32 else { throw TiledLog.wrongWidth(TileTree.path(level: 0, index: index, width: width), tile.count, width) }
            for offset in 0..<width { tree.append(leafHash: Array(tile[(offset * 32)..<(offset * 32 + 32)])) }
            index += 1
        }
        guard tree.rootHash() == checkpoint.rootHash else {
            throw SignetError(.malformedInput, "the log's tiles at '\(path)' do not give its checkpoint's root hash: it was changed outside Signet", path: path)
        }
        (self.tree, self.checkpoint, self.checkpointNote) = (tree, checkpoint, note)
    }

    /// Appends `entries` and writes the tiles and entry bundles that change; returns the new
    /// checkpoint (to be signed, cosigned and published).
    public mutating func append(_ entries: [[UInt8]]) throws -> Checkpoint {
        guard !entries.isEmpty else { return checkpoint }
        if let long = entries.first(where: { $0.count > Self.largestEntry }) {
            throw SignetError(.usage, "an entry of \(long.count) bytes is longer than a log entry can be (\(Self.largestEntry))")
        }
        let old = tree.size
        // The partial entry bundle the log ends with, extended.
        let firstBundle = old / TileTree.width
        var bundle: [UInt8] = []
        if old % TileTree.width > 0 {
            let bundlePath = "tile/entries/" + TileTree.indexPath(firstBundle) + ".p/\(old % TileTree.width)"
            bundle = try Self.read(path + "/" + bundlePath, limit: TileTree.width * (Self.largestEntry + 2), what: "an entry bundle")
        }
        var inBundle = old % TileTree.width
        var bundleIndex = firstBundle
        for entry in entries {
            tree.append(leafHash: TileTree.leafHash(entry))
            bundle += [UInt8(entry.count >> 8), UInt8(entry.count & 0xff)] + entry
            inBundle += 1
            if inBundle == TileTree.width {
                try write("tile/entries/" + TileTree.indexPath(bundleIndex), bundle)
                (bundle, inBundle, bundleIndex) = ([], 0, bundleIndex + 1)
            }
        }
        if inBundle > 0 { try write("tile/entries/" + TileTree.indexPath(bundleIndex) + ".p/\(inBundle)", bundle) }
        // Every hash tile from the one the old size ended in.
        for (tilePath, data) in tree.tiles() where Self.changed(tilePath, since: old) {
            try write(tilePath, data)
        }
        // Every tile durable before a checkpoint can name them (one syncfs for all).
        try AtomicFile.syncFilesystem(of: path)
        return try Checkpoint(origin: key.name, size: UInt64(tree.size), rootHash: tree.rootHash())
    }

    /// Replaces the published checkpoint by `note` (signed by the log's key, cosigned or not):
    /// readers see the appended entries from now on.
    public mutating func publish(checkpoint note: [UInt8]) throws {
        let opened = try SignedNote.open(note, known: [key])
        let next = try Checkpoint(text: opened.text)
        guard next.origin == key.name, next.size == UInt64(tree.size), next.rootHash == tree.rootHash() else {
            throw SignetError(.usage, "the checkpoint to publish is not this log's tree of \(tree.size) entries")
        }
        try AtomicFile.write(note, to: path + "/checkpoint", mode: 0o644, replace: true)
        (checkpoint, checkpointNote) = (next, note)
    }

    /// The entries `range` of the published log, read from the entry bundles.
    public func entries(_ range: Range<Int>) throws -> [[UInt8]] {
        guard range.lowerBound >= 0, range.upperBound <= Int(checkpoint.size) else { throw SignetError(.usage, "entries \(range) of \(checkpoint.size)") }
        var out: [[UInt8]] = []
        var index = range.lowerBound / TileTree.width
        while index * TileTree.width < range.upperBound {
            let width = min(TileTree.width, Int(checkpoint.size) - index * TileTree.width)
            let name = "tile/entries/" + TileTree.indexPath(index) + (width < TileTree.width ? ".p/\(width)" : "")
            let bundle = try Self.read(path + "/" + name, limit: TileTree.width * (Self.largestEntry + 2), what: "an entry bundle")
            let parsed = try Self.bundleEntries(bundle, count: width, path: name)
            for (offset, entry) in parsed.enumerated() where range.contains(index * TileTree.width + offset) { out.append(entry) }
            index += 1
        }
        return out
    }

    /// The entries of a bundle: exactly `count` length-prefixed entries, nothing after them.
    public static func bundleEntries(_ bundle: [UInt8], count: Int, path: String) throws -> [[UInt8]] {
        var entries: [[UInt8]] = []
        var at = 0
        while at < bundle.count {
            guard at + 2 <= bundle.count else { throw malformedBundle(path) }
            let length = Int(bundle[at]) << 8 | Int(bundle[at + 1])
            guard at + 2 + length <= bundle.count else { throw malformedBundle(path) }
            entries.append(Array(bundle[(at + 2)..<(at + 2 + length)]))
            at += 2 + length
        }
        guard entries.count == count else { throw malformedBundle(path) }
        return entries
    }

    static func malformedBundle(_ path: String) -> SignetError {
        SignetError(.malformedInput, "the log's entry bundle \(path) is not its width of length-prefixed entries (c2sp.org/tlog-tiles)", path: path)
    }

    /// Whether the tile at `tilePath` (of the new tree) holds hashes that a tree of `old` leaves
    /// did not: a tile from the one the old size ended in onward.
    static func changed(_ tilePath: String, since old: Int) -> Bool {
        let parts = tilePath.split(separator: "/")
        guard parts.count >= 3, let level = Int(parts[1]) else { return true }
        let digits = parts[2...].prefix { !$0.hasSuffix(".p") }.map { $0.hasPrefix("x") ? String($0.dropFirst()) : String($0) }
        let last = parts[2...].first(where: { $0.hasSuffix(".p") }).map { String($0.dropLast(2)) }
        let index = Int((digits + (last.map { [$0.hasPrefix("x") ? String($0.dropFirst()) : $0] } ?? [])).joined()) ?? 0
        let oldNodes = old >> (level * TileTree.height)
        return index >= oldNodes / TileTree.width
    }

    private func write(_ name: String, _ bytes: [UInt8]) throws {
        let full = path + "/" + name
        try Self.makeFolders(AtomicFile.parentDirectory(of: full))
        try AtomicFile.write(bytes, to: full, mode: 0o644, replace: true, durable: false)
    }

    static func makeFolders(_ folder: String) throws {
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        } catch {
            throw SignetError(.io, "cannot create the log's folder: \(error.localizedDescription)", path: folder)
        }
    }

    static func read(_ path: String, limit: Int, what: String) throws -> [UInt8] {
        try InputFile.open(path, what: what, followSymlinks: false).readAll(limit: limit, what: what)
    }
}
