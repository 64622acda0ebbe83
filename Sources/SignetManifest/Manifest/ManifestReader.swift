import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SignetCore
import SignetCrypto

/// Builds a manifest from ``/SignetCore/StrictJSON``'s events: the top-level fields as scalars, and each
/// entry of `files` checked and appended as a compact ``Manifest/File`` as soon as its object
/// closes. Unknown fields (at either level) are skipped, as a newer writer may add them.
struct ManifestReader: StrictJSON.Handler {
    struct Failure: Error {
        let reason: String
    }

    /// The top-level scalars by key (objects and arrays other than `files` are not kept).
    var fields: [String: StrictJSON.Scalar] = [:]
    var files: [Manifest.File] = []
    var sawFiles = false
    /// The first defect of a file entry; reported after the format was checked.
    var fileFailure: Failure? = nil
    /// 0 outside the document, 1 in the top object, 2 in `files`, 3 in one of its entries.
    private(set) var depth = 0
    /// Depth of an unknown value being skipped, below the current level.
    private var skipping = 0
    private var key: String? = nil
    private var inFiles = false
    private var seen = Set<String>()
    /// Whether every path so far was ASCII and after the one before it in byte order.
    private var inOrder = true
    /// The fields of the file entry being read.
    private var entry = Entry()
    private struct Entry {
        var path: StrictJSON.Scalar?
        var sha256: StrictJSON.Scalar?
        var size: StrictJSON.Scalar?
        var mode: StrictJSON.Scalar?
        var structured: StrictJSON.Scalar?
        var chunks: StrictJSON.Scalar?
        var blocks: StrictJSON.Scalar?
        var deflate: StrictJSON.Scalar?
        var index: StrictJSON.Scalar?
        var verity: StrictJSON.Scalar?
    }

    private func wrongType(_ what: String) -> Failure { Failure(reason: "the field \"\(what)\" has the wrong type") }

    mutating func begin(isObject: Bool) throws {
        if skipping > 0 { skipping += 1; return }
        switch depth {
        case 0:
            guard isObject else { throw Failure(reason: "it is not a JSON object") }
            depth = 1
        case 1:
            if key == "files" {
                guard !isObject else { throw wrongType("files") }
                depth = 2
                inFiles = true
                sawFiles = true
            } else {
                skipping = 1
            }
        case 2:
            guard isObject else { throw wrongType("files.\(files.count)") }
            depth = 3
            entry = Entry()
        default:
            skipping = 1 // a nested value inside a file entry: not one of its fields
        }
    }

    mutating func end() throws {
        if skipping > 0 {
            skipping -= 1
            if skipping == 0 { key = nil }
            return
        }
        switch depth {
        case 3:
            depth = 2
            finishEntry()
        case 2:
            depth = 1
            inFiles = false
        default:
            depth -= 1
        }
        key = nil
    }

    mutating func key(_ key: String) throws {
        if skipping > 0 { return }
        self.key = key
    }

    mutating func scalar(_ value: StrictJSON.Scalar) throws {
        if skipping > 0 { return }
        switch depth {
        case 1:
            if let key {
                if key == "files" { throw wrongType("files") }
                fields[key] = value
            }
        case 2: throw wrongType("files.\(files.count)")
        case 3:
            switch key {
            case "path": entry.path = value
            case "sha256": entry.sha256 = value
            case "size": entry.size = value
            case "mode": entry.mode = value
            case "structured": entry.structured = value
            case "chunks": entry.chunks = value
            case "blocks": entry.blocks = value
            case "deflate": entry.deflate = value
            case "index": entry.index = value
            case "verity": entry.verity = value
            default: break
            }
        default: throw Failure(reason: "it is not a JSON object")
        }
        key = nil
    }

    /// Checks the entry just closed and keeps it (or the first defect, then stops keeping).
    private mutating func finishEntry() {
        guard fileFailure == nil else { return }
        let index = files.count
        func text(_ value: StrictJSON.Scalar?) -> String? {
            guard case .string(let text)? = value else { return nil }
            return text
        }
        func absentOrWrong(_ field: String, _ value: StrictJSON.Scalar?) -> Failure {
            Failure(reason: "the field \"files.\(index).\(field)\" \(value == nil ? "is missing" : "has the wrong type")")
        }
        guard let path = text(entry.path) else {
            fileFailure = absentOrWrong("path", entry.path)
            return
        }
        if case .failure(let refusal) = ResourcePath.validateResource(path) {
            fileFailure = Failure(reason: "file \"\(path)\": \(refusal.reason)")
            return
        }
        // Swift compares Strings by canonical equivalence, so NFC/NFD twins collide in `seen`.
        // Pack writes paths in byte order: while they come in that order and are ASCII (for
        // which equivalence is byte equality), a repeat can only be the previous path, and
        // no set of 50,000 paths is built. The first path out of order or not ASCII moves
        // every path so far into the set.
        let ascii = path.utf8.allSatisfy { $0 < 0x80 }
        if inOrder, ascii, files.last.map({ ResourcePath.byteOrder($0.path, path) }) ?? true {
            // In order, so new: strictly after the previous path, hence after every one before.
        } else {
            if inOrder {
                inOrder = false
                seen = Set(files.map(\.path))
            }
            if !seen.insert(path).inserted {
                fileFailure = Failure(reason: "file \"\(path)\" is listed twice (or twice after Unicode normalisation)")
                return
            }
        }
        guard let hex = text(entry.sha256), let content = Manifest.ContentHash(lowercaseHex: hex) else {
            fileFailure = Failure(reason: "file \"\(path)\" has a sha256 that is not 64 lowercase hex characters")
            return
        }
        guard case .number(let sizeText)? = entry.size, let size = UInt64(sizeText) else {
            fileFailure =
                entry.size == nil
                ? absentOrWrong("size", nil) : Failure(reason: "file \"\(path)\" has a size that is not a whole number from 0 to \(UInt64.max)")
            return
        }
        guard let modeText = text(entry.mode) else {
            fileFailure = absentOrWrong("mode", entry.mode)
            return
        }
        guard let mode = Manifest.FileMode(rawValue: modeText) else {
            fileFailure = Failure(reason: "file \"\(path)\" has mode \"\(modeText)\"; only 0644 and 0755 are allowed")
            return
        }
        var structured: StructuredFormat? = nil
        if let value = entry.structured {
            // An unknown format is refused, not read as "compare bytes": a newer writer's
            // format must not silently lose the protection it was given.
            guard let text = text(value), let format = StructuredFormat(rawValue: text) else {
                fileFailure = Failure(
                    reason:
                        "file \"\(path)\" has structured format \(text(value).map { "\"\($0)\"" } ?? "of the wrong type"); this Signet knows \(StructuredFormat.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: " and "))"
                )
                return
            }
            structured = format
        }
        var file = Manifest.File(path: path, size: size, content: content, mode: mode, structured: structured)
        if let value = entry.verity {
            guard let hex = text(value), let digest = Manifest.ContentHash(lowercaseHex: hex) else {
                fileFailure = Failure(reason: "file \"\(path)\" has a verity digest that is not 64 lowercase hex digits")
                return
            }
            file.verity = digest
        }
        if let value = entry.index {
            guard entry.chunks == nil, entry.blocks == nil, entry.deflate == nil else {
                fileFailure = Failure(reason: "file \"\(path)\" has a chunk index both inline and in the chunk-index entry")
                return
            }
            guard let indexText = text(value) else {
                fileFailure = absentOrWrong("index", value)
                return
            }
            do {
                file.indexed = try IndexedChunks(parsing: indexText, size: size)
            } catch let refusal as ChunkIndex.Refused {
                fileFailure = Failure(reason: "file \"\(path)\" has \(refusal.reason)")
                return
            } catch {
                fileFailure = Failure(reason: "file \"\(path)\" has a chunk index that cannot be read")
                return
            }
        } else if let value = entry.chunks {
            guard let chunkText = text(value) else {
                fileFailure = absentOrWrong("chunks", value)
                return
            }
            guard let blockText = entry.blocks.flatMap({ text($0) }) else {
                fileFailure = absentOrWrong("blocks", entry.blocks)
                return
            }
            do {
                var chunks = try ChunkIndex(parsing: chunkText, size: size)
                try chunks.parseBlocks(blockText, size: size)
                file.chunks = chunks
                if let value = entry.deflate {
                    guard let deflateText = text(value) else {
                        fileFailure = absentOrWrong("deflate", value)
                        return
                    }
                    file.deflate = try DeflateIndex(parsing: deflateText, size: size)
                }
            } catch let refusal as ChunkIndex.Refused {
                fileFailure = Failure(reason: "file \"\(path)\" has \(refusal.reason)")
                return
            } catch {
                fileFailure = Failure(reason: "file \"\(path)\" has a chunk index that cannot be read")
                return
            }
        } else if entry.blocks != nil || entry.deflate != nil {
            fileFailure = Failure(reason: "file \"\(path)\" has \(entry.blocks != nil ? "block hashes" : "a deflate index") without a chunk index")
            return
        }
        files.append(file)
    }
}
